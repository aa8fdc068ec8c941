// Owning device / pinned buffers, cudaMemGetInfo, and the caching device
// allocator: block reuse, stream separation, emptying the cache, and the
// bytes it reports to the MemoryLedger under MemTier::device.
#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include "core/cuda_stream.h"
#include "core/device_buffer.h"
#include "core/memory_ledger.h"
#include "offload/host_pool.h"
#include "offload/pinned_host_allocator.h"
#include "tests/cuda/cuda_test_util.h"

using namespace zeroshard;
using namespace zeroshard::testing;

TEST_CASE("DeviceBuffer and PinnedHostBuffer own, move and round-trip memory") {
  DeviceBuffer empty(0);
  CHECK(empty.empty());
  CHECK(empty.data() == nullptr);

  const std::vector<float> src = random_floats(1000, 1, 1.0f);
  DeviceBuffer a = upload(src);
  CHECK(a.bytes() == 4000);
  void* ptr = a.data();
  DeviceBuffer b(std::move(a));
  CHECK(a.empty());
  CHECK(b.data() == ptr);
  DeviceBuffer c;
  c = std::move(b);
  CHECK(c.data() == ptr);
  CHECK(download<float>(c.data(), src.size()) == src);

  PinnedHostBuffer pinned(4000);
  CHECK(pinned.bytes() == 4000);
  ZS_CUDA_CHECK(cudaMemcpy(pinned.data(), c.data(), 4000, cudaMemcpyDeviceToHost));
  CHECK(std::memcmp(pinned.data(), src.data(), 4000) == 0);
  PinnedHostBuffer moved(std::move(pinned));
  CHECK(pinned.empty());
  CHECK(!moved.empty());
}

TEST_CASE("device_memory_info reports a plausible device") {
  const DeviceMemoryInfo before = device_memory_info();
  CHECK(before.total_bytes > 0);
  CHECK(before.free_bytes <= before.total_bytes);
  {
    DeviceBuffer big(std::size_t{256} << 20);
    const DeviceMemoryInfo during = device_memory_info();
    // At least 192 MiB of the 256 MiB show up as used (the rest is slack
    // for other processes allocating meanwhile).
    CHECK(during.free_bytes + (std::size_t{192} << 20) <= before.free_bytes);
  }
}

TEST_CASE("CachingDeviceAllocator reuses released blocks and reports them to the ledger") {
  MemoryLedger ledger;
  CachingDeviceAllocator alloc(&ledger);
  CHECK(CachingDeviceAllocator::round_size(1) == 512);
  CHECK(CachingDeviceAllocator::round_size(1000) == 1024);
  CHECK(CachingDeviceAllocator::round_size(0) == 0);

  void* first = nullptr;
  {
    DeviceBlock block = alloc.allocate(1000, MemCategory::gradients);
    first = block.data();
    CHECK(block.bytes() == 1000);
    CHECK(block.capacity() == 1024);
    CHECK(ledger.current(MemCategory::gradients, MemTier::device) == 1024);
    CHECK(ledger.current(MemCategory::gradients, MemTier::host) == 0);
    CHECK(alloc.stats().allocated_bytes == 1024);
    CHECK(alloc.stats().live_blocks == 1);
  }
  CHECK(ledger.current(MemCategory::gradients, MemTier::device) == 0);
  CHECK(ledger.peak(MemCategory::gradients) == 1024);
  CHECK(alloc.stats().cached_bytes == 1024);
  CHECK(alloc.stats().allocated_bytes == 0);

  // Same rounded size, and a smaller one within a quarter: both reuse.
  {
    DeviceBlock again = alloc.allocate(1024, MemCategory::parameters);
    CHECK(again.data() == first);
    CHECK(ledger.current(MemCategory::parameters, MemTier::device) == 1024);
  }
  {
    DeviceBlock smaller = alloc.allocate(900, MemCategory::parameters);
    CHECK(smaller.data() == first);
    CHECK(smaller.capacity() == 1024);
  }
  CHECK(alloc.stats().cuda_mallocs == 1);
  CHECK(alloc.stats().cache_hits == 2);

  // Much smaller requests do not take the big block; neither does another stream.
  {
    DeviceBlock tiny = alloc.allocate(100, MemCategory::parameters);
    CHECK(tiny.data() != first);
    CudaStream stream = CudaStream::create();
    DeviceBlock other = alloc.allocate(1024, MemCategory::parameters, stream.get());
    CHECK(other.data() != first);
  }
  CHECK(alloc.stats().cuda_mallocs == 3);
  CHECK(alloc.stats().cached_bytes == 1024 + 512 + 1024);
  CHECK(alloc.stats().peak_reserved >= 1024 + 512 + 1024);

  alloc.empty_cache();
  CHECK(alloc.stats().cached_bytes == 0);
  DeviceBlock fresh = alloc.allocate(1024, MemCategory::optimizer_states);
  CHECK(alloc.stats().cuda_mallocs == 4);
  CHECK(ledger.current(MemCategory::optimizer_states, MemTier::device) == 1024);
  fresh.release();
  CHECK(fresh.empty());
  CHECK(ledger.current_total() == 0);
}

TEST_CASE("DeviceBlock moves and may outlive its allocator") {
  MemoryLedger ledger;
  DeviceBlock survivor;
  {
    CachingDeviceAllocator alloc(&ledger);
    DeviceBlock a = alloc.allocate(4096, MemCategory::unsharded);
    void* ptr = a.data();
    DeviceBlock b(std::move(a));
    CHECK(a.empty());
    CHECK(b.data() == ptr);
    survivor = std::move(b);
    CHECK(survivor.data() == ptr);
    CHECK(ledger.current(MemCategory::unsharded, MemTier::device) == 4096);
    DeviceBlock empty = alloc.allocate(0, MemCategory::unsharded);
    CHECK(empty.empty());
  }
  ZS_CUDA_CHECK(cudaMemset(survivor.data(), 0, survivor.bytes()));
  survivor.release();
  CHECK(ledger.current(MemCategory::unsharded, MemTier::device) == 0);
}

TEST_CASE("CachingDeviceAllocator frees its cache and retries when cudaMalloc runs out") {
  CachingDeviceAllocator alloc;
  const DeviceMemoryInfo info = device_memory_info();
  // Cache about 60% of the free memory, then ask for 60% again: only an
  // emptied cache can satisfy the second request.
  const std::size_t big = info.free_bytes / 10 * 6;
  { DeviceBlock held = alloc.allocate(big, MemCategory::parameters); }
  CHECK(alloc.stats().cached_bytes >= big);
  DeviceBlock second = alloc.allocate(big + (std::size_t{64} << 20), MemCategory::parameters);
  CHECK(!second.empty());
  CHECK(alloc.stats().cached_bytes == 0);
}

TEST_CASE("HostPool with pin_memory hands out page-locked memory, accounted on the host tier") {
  MemoryLedger ledger;
  HostPool pool(ledger, make_host_allocator(true, "zero_optimization.offload_optimizer.pin_memory"));
  CHECK(pool.allocator().pinned());
  HostBuffer b = pool.acquire(3 * 4096 + 5, MemCategory::optimizer_states);
  cudaPointerAttributes attr{};
  REQUIRE(cudaPointerGetAttributes(&attr, b.data()) == cudaSuccess);
  CHECK(attr.type == cudaMemoryTypeHost);
  CHECK(ledger.current(MemCategory::optimizer_states, MemTier::host) == b.capacity());
  // A pinned buffer round-trips through the device.
  DeviceBuffer d(b.size());
  std::memset(b.data(), 0x5a, b.size());
  REQUIRE(cudaMemcpy(d.data(), b.data(), b.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  std::memset(b.data(), 0, b.size());
  REQUIRE(cudaMemcpy(b.data(), d.data(), b.size(), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(static_cast<unsigned char>(b.data()[b.size() - 1]) == 0x5a);
}
