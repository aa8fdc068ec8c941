// libnbc all-reduce algorithm selection; see [Note: libnbc all-reduce
// algorithm] in comm/mpi/mpi_nbc_tuning.h.
#include "comm/mpi/mpi_nbc_tuning.h"

#include <mpi.h>

#include "comm/mpi/mpi_environment.h"
#include "comm/mpi/mpi_leak_scope.h"

namespace zeroshard {

namespace {

constexpr int kAlgorithmAuto = 0;  // libnbc: "ignore" (its own choice)
constexpr int kAlgorithmRing = 1;

// The MPI_T handle on coll_libnbc_iallreduce_algorithm, opened once.
class IallreduceAlgorithm {
 public:
  static IallreduceAlgorithm& instance() {
    static IallreduceAlgorithm algorithm;
    return algorithm;
  }

  IallreduceAlgorithm(const IallreduceAlgorithm&) = delete;
  IallreduceAlgorithm& operator=(const IallreduceAlgorithm&) = delete;

  bool active() const { return active_; }
  std::mutex& mutex() { return mu_; }

  // Writes `value` unless it is the current one, or the selection is off.
  // The caller holds mutex().
  void set(int value) {
    if (!active_ || value == current_ || mpi_finalized()) return;
    const MpiLeakScope openmpi_allocations;  // [Note: leak checks beside OpenMPI]
    if (MPI_T_cvar_write(handle_, &value) == MPI_SUCCESS) {
      current_ = value;
    } else {
      active_ = false;  // leave libnbc to its own choice from now on
    }
  }

 private:
  IallreduceAlgorithm() {
    const MpiLeakScope openmpi_allocations;  // [Note: leak checks beside OpenMPI]
    int provided = MPI_THREAD_SINGLE;
    if (MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) return;
    t_initialized_ = true;
    int index = -1;
    if (MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &index) != MPI_SUCCESS) return;
    int elements = 0;
    if (MPI_T_cvar_handle_alloc(index, nullptr, &handle_, &elements) != MPI_SUCCESS) return;
    have_handle_ = true;
    int value = -1;
    if (elements != 1 || MPI_T_cvar_read(handle_, &value) != MPI_SUCCESS) return;
    current_ = value;
    active_ = value == kAlgorithmAuto;  // non-zero: the user chose; keep it
  }

  // Constructed after MPI started, so destroyed (at exit) before
  // zeroshard's MPI_Finalize handler runs, as MPI_T_finalize must be.
  ~IallreduceAlgorithm() { close(); }

  void close() {
    std::lock_guard<std::mutex> lock(mu_);
    active_ = false;
    if (mpi_finalized()) return;
    const MpiLeakScope openmpi_allocations;  // [Note: leak checks beside OpenMPI]
    if (have_handle_) MPI_T_cvar_handle_free(&handle_);
    have_handle_ = false;
    if (t_initialized_) MPI_T_finalize();
    t_initialized_ = false;
  }

  std::mutex mu_;
  MPI_T_cvar_handle handle_{};
  bool t_initialized_ = false;
  bool have_handle_ = false;
  bool active_ = false;
  int current_ = kAlgorithmAuto;
};

}  // namespace

std::unique_lock<std::mutex> select_iallreduce_algorithm(std::size_t bytes, std::size_t count,
                                                         int world_size) {
  IallreduceAlgorithm& algorithm = IallreduceAlgorithm::instance();
  std::unique_lock<std::mutex> lock(algorithm.mutex());
  const bool ring = bytes >= kRingAllReduceMinBytes && world_size > 1 &&
                    count >= static_cast<std::size_t>(world_size);
  algorithm.set(ring ? kAlgorithmRing : kAlgorithmAuto);
  return lock;
}

bool iallreduce_algorithm_selection_active() {
  IallreduceAlgorithm& algorithm = IallreduceAlgorithm::instance();
  std::lock_guard<std::mutex> lock(algorithm.mutex());
  return algorithm.active();
}

}  // namespace zeroshard
