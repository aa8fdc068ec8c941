// SwapPipeline: the swapper's inner loop. Walks a sequence of sub-groups
// whose arrays live in swap files, overlapping the read of sub-group i+1,
// the caller's update of sub-group i and the write-back of sub-group i-1
// (ZeRO-Infinity's overlap of NVMe traffic with the CPU optimizer step;
// DeepSpeed's sub_group_size / pipeline_read / pipeline_write).
//
// [Note: swap pipeline]
// Sub-group i is staged in buffer set i % buffer_count, one HostBuffer per
// array, leased from a HostPool (so a steady-state step does not allocate).
// Before a set is refilled, the write that last used it has completed. With
// buffer_count >= 3 and both pipeline flags on, the reads run one sub-group
// ahead and writes drain behind; with pipeline_read off a sub-group is read
// only when its update is due; with pipeline_write off each write is waited
// for before the next update. An array whose key was never written reads as
// zeros (optimizer moments start at zero without an initial write).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/tracer.h"
#include "offload/host_pool.h"
#include "offload/swap_directory.h"

namespace zeroshard {

/// One array of a sub-group.
struct SwapSlot {
  std::string key;          ///< swap file key (offload/swap_naming.h rules)
  std::uint64_t bytes = 0;  ///< logical bytes of the array
  bool write_back = true;   ///< written back after the update (false: read only)
  SwapDirectory* dir = nullptr;  ///< directory holding the key (must outlive the run)
};

/// Pipeline settings (offload_optimizer's buffer_count, pipeline_read,
/// pipeline_write).
struct SwapPipelineOptions {
  int buffer_count = 4;  ///< staging sets, >= 1
  bool pipeline_read = true;
  bool pipeline_write = true;
  /// When set, the time blocked in reads and writes is charged to io_wait
  /// and each batch becomes an I/O span (core/tracer.h). Not owned.
  Tracer* tracer = nullptr;
};

/// What one run moved and waited for. Seconds are wall time of the thread
/// running the pipeline blocked in wait() calls.
struct SwapPipelineStats {
  std::uint64_t bytes_read = 0;     ///< logical bytes read from files
  std::uint64_t bytes_written = 0;  ///< logical bytes written
  double read_wait_s = 0;
  double write_wait_s = 0;
  double update_s = 0;  ///< time inside the update callback
  /// Adds another run's figures.
  SwapPipelineStats& operator+=(const SwapPipelineStats& o);
};

/// Runs the pipeline over sub-groups 0..count-1. `slots(i)` lists sub-group
/// i's arrays (called once per sub-group, in order); `update(i, data)` gets
/// one pointer per slot, in the same order, to a buffer holding the array's
/// bytes (at least bytes long, 4 KiB aligned), which it may modify; the
/// slots with write_back are then written as the keys' new content.
/// `category` is what the ledger records the staging buffers as.
/// Throws IoError (from the directory) or whatever update throws; on an
/// exception every I/O already started is completed before returning, and
/// a failed write leaves the key's previous file in place.
/// Slots may name different directories (one batch per directory).
/// Thread safety: one thread per directory (SwapDirectory's rule).
SwapPipelineStats run_swap_pipeline(HostPool& pool, const SwapPipelineOptions& options,
                                    MemCategory category, std::size_t count,
                                    const std::function<std::vector<SwapSlot>(std::size_t)>& slots,
                                    const std::function<void(std::size_t, std::span<std::byte* const>)>& update);

/// The pipeline's order of work over sub-groups 0..count-1, shared by
/// run_swap_pipeline and replay_swap_pipeline: calls read(i) when sub-group
/// i's read starts (into staging set i % buffer_count), update(i) and
/// write(i, wait_now) (wait_now: pipeline_write off) in the order the
/// pipeline runs them. Reads run one sub-group ahead with pipeline_read
/// and buffer_count >= 2. Exceptions from the callbacks propagate.
void swap_pipeline_schedule(std::size_t count, const SwapPipelineOptions& options,
                            const std::function<void(std::size_t)>& read,
                            const std::function<void(std::size_t)>& update,
                            const std::function<void(std::size_t, bool)>& write);

/// Whether a staging buffer leased for `size` bytes with `capacity` bytes
/// (0: none) holds a slot of `bytes` logical bytes as it is (padded to
/// SwapDirectory::padded_size for the I/O); otherwise the pipeline releases
/// it and leases one for `bytes`. Pure.
bool staging_buffer_holds(std::size_t capacity, std::size_t size, std::uint64_t bytes);

/// run_swap_pipeline's staging leases without I/O or memory: the same
/// schedule, staging sets and buffer rule over `pool`, a HostPoolSizes
/// (offload/host_pool.h) recording into its ledger as the real pool would.
/// `slot_bytes(i)` lists sub-group i's slots' bytes, in slot order. Every
/// staging lease is released at the end, as the real pipeline's are. For
/// the memory estimate (runtime/plan/memory_replay.h). Throws InvariantError for
/// buffer_count < 1.
void replay_swap_pipeline(HostPoolSizes& pool, const SwapPipelineOptions& options, MemCategory category,
                          std::size_t count, const std::function<std::vector<std::uint64_t>(std::size_t)>& slot_bytes);

}  // namespace zeroshard
