// zs_leak_canary: a program that leaks one buffer on purpose, for
// tests/comm/leak_check.sh in the ASan build: LeakSanitizer must report that
// leak, and only it, in a process that ran MPI ([Note: leak checks beside
// OpenMPI]). With no argument it leaks nothing and must exit 0.
//
// Usage: zs_leak_canary [leak]   (under mpirun or alone)
// Each rank makes the world communicator, an all_reduce (a blocking one,
// over the non-blocking path) and a barrier, then with "leak" allocates 77
// bytes in leak_canary_allocation() and drops the pointer.
#include <cstdio>
#include <cstring>
#include <vector>

#include "comm/communicator.h"

namespace {

// noinline: the leak report's stack names this frame.
[[gnu::noinline]] void leak_canary_allocation() {
  char* volatile buffer = new char[77];
  buffer[0] = 1;
}

}  // namespace

int main(int argc, char** argv) {
  const bool leak = argc > 1 && std::strcmp(argv[1], "leak") == 0;
  if (argc > 2 || (argc == 2 && !leak)) {
    std::fprintf(stderr, "usage: zs_leak_canary [leak]\n");
    return 2;
  }
  auto world = zeroshard::make_world_communicator();
  std::vector<float> values(57, 1.0f);
  world->all_reduce(values.data(), values.size(), zeroshard::DType::f32, zeroshard::ReduceOp::sum);
  world->barrier();
  if (values[56] != static_cast<float>(world->world_size())) {
    std::fprintf(stderr, "zs_leak_canary: all_reduce gave %g on rank %d\n", values[56], world->rank());
    return 1;
  }
  if (leak) leak_canary_allocation();
  return 0;
}
