// What OpenMPI allocates, kept out of LeakSanitizer's report in an
// AddressSanitizer build of zeroshard.

// [Note: leak checks beside OpenMPI]
// OpenMPI 4.1 drops allocations it makes: about 3,350 (~120 KB) in
// MPI_Init, a few more in MPI_T's control-variable calls. Its libraries
// have no frame pointers, so LeakSanitizer tells those apart from
// zeroshard's own leaks by the modules on an allocation's stack only with
// its slow (DWARF) unwinder on every malloc, which made the ASan test suite
// about 5x slower (test_grad_buckets at 3 ranks: 123 s against 21 s). In a
// build with AddressSanitizer, zeroshard instead (1) marks what OpenMPI
// allocates on zeroshard's threads during MPI_Init_thread and the MPI_T
// calls as not leaked (MpiLeakScope around them, mpi_environment.cpp and
// mpi_nbc_tuning.cpp), and (2) runs the process's leak check from its exit
// handler just before MPI_Finalize, while OpenMPI's tables are still
// reachable (LeakSanitizer's own check at exit then does not run again).
// What escapes both, 2 allocations on PMIx's own thread during MPI_Init,
// is suppressed by module in scripts/sanitizers/lsan.supp. A leak of
// zeroshard's own is reported with its (fast-unwound) stack. Not checked:
// what static destructors allocate after the handler. Other builds compile
// none of this.
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define ZS_LEAK_SANITIZER 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ZS_LEAK_SANITIZER 1
#endif
#endif

#ifdef ZS_LEAK_SANITIZER
#include <sanitizer/lsan_interface.h>
#endif

namespace zeroshard {

/// While an MpiLeakScope lives, LeakSanitizer treats what this thread
/// allocates as not leaked (__lsan_disable/__lsan_enable); in a build
/// without AddressSanitizer it does nothing. Only around MPI calls whose
/// allocations OpenMPI keeps or drops itself ([Note: leak checks beside
/// OpenMPI]). Thread safety: per thread, as LeakSanitizer's counter is.
class MpiLeakScope {
 public:
#ifdef ZS_LEAK_SANITIZER
  MpiLeakScope() { __lsan_disable(); }
  ~MpiLeakScope() { __lsan_enable(); }
#else
  // User-provided, so that a scope object is never an unused variable.
  MpiLeakScope() {}
  ~MpiLeakScope() {}
#endif
  MpiLeakScope(const MpiLeakScope&) = delete;
  MpiLeakScope& operator=(const MpiLeakScope&) = delete;
};

/// In an AddressSanitizer build, runs LeakSanitizer's check now (a leak
/// ends the process with its report) and no more at exit; elsewhere does
/// nothing. Called once, by the exit handler before MPI_Finalize.
inline void check_leaks_before_mpi_finalize() {
#ifdef ZS_LEAK_SANITIZER
  __lsan_do_leak_check();
#endif
}

}  // namespace zeroshard
