// [Note: libnbc all-reduce algorithm]
// Open MPI runs MPI_Iallreduce in its libnbc component. Its automatic choice
// takes a binomial tree (reduce to one rank, then broadcast from it, so the
// whole buffer crosses the tree twice, one phase after the other) whenever
// the call is in place or the communicator has fewer than 4 ranks, which is
// every call MpiCommunicator::iall_reduce makes (MPI_IN_PLACE). Blocking
// MPI_Allreduce (the "tuned" component) uses a ring or recursive halving
// instead. Measured with bench/collectives on 2 ranks: the binomial
// iallreduce reached 0.32-0.52 of MPI_Allreduce's bus bandwidth at 1 MiB to
// 256 MiB, libnbc's ring 0.88-0.99 (bench/collectives/README.md).
//
// select_iallreduce_algorithm() therefore sets libnbc's control variable
// coll_libnbc_iallreduce_algorithm through the MPI tool interface (MPI_T;
// Open MPI lets a program write it at run time) just before each
// MPI_Iallreduce: the ring (1) for messages of at least
// kRingAllReduceMinBytes and at least as many elements as ranks, libnbc's own
// choice (0) below, where a message is latency-bound and the tree takes fewer
// steps. Every rank passes the same size and rank count (SPMD), so every
// rank picks the same algorithm, as the variable's MPI_T scope (all
// processes must agree) requires. The variable is process-wide: an
// application's own MPI_Iallreduce calls run with whatever zeroshard's last
// iall_reduce set (the same on every rank, so still consistent).
//
// It does nothing when the variable does not exist (another MPI library, or
// an Open MPI without libnbc), when MPI_T cannot be initialised, or when the
// user already chose an algorithm (OMPI_MCA_coll_libnbc_iallreduce_algorithm
// or --mca ... set to a non-zero value): the user's setting wins.
#pragma once

#include <cstddef>
#include <mutex>

namespace zeroshard {

/// Smallest all-reduce message (bytes) that gets libnbc's ring algorithm.
/// 64 KiB: libnbc's own threshold below which it always uses the tree.
inline constexpr std::size_t kRingAllReduceMinBytes = std::size_t{64} << 10;

/// Sets libnbc's iallreduce algorithm for a message of `bytes` bytes and
/// `count` elements on `world_size` ranks ([Note: libnbc all-reduce
/// algorithm]) and returns a lock on the process-wide setting: the caller
/// starts its MPI_Iallreduce while holding it, so that two threads that
/// start all-reduces on different communicators cannot swap each other's
/// setting. Needs MPI to be running (MpiCommunicator guarantees it); the
/// MPI_T handle is opened on first use and closed at exit, before
/// MPI_Finalize. Never throws for MPI_T failures (the selection is then
/// off); std::system_error only if the mutex fails.
/// Thread safety: safe from any thread.
std::unique_lock<std::mutex> select_iallreduce_algorithm(std::size_t bytes, std::size_t count,
                                                         int world_size);

/// True if select_iallreduce_algorithm() changes anything in this process
/// (Open MPI's libnbc found through MPI_T and the user chose no algorithm).
/// Thread safety: safe from any thread.
bool iallreduce_algorithm_selection_active();

}  // namespace zeroshard
