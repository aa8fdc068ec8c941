// HostPool: alignment, pre-faulted reuse by size class, ledger accounting
// under MemTier::host, reserve/trim, a custom allocator (the hook a CUDA
// build uses for pinned memory) and one that breaks the 4 KiB alignment,
// leases that outlive the pool, and the
// size-only model (HostPoolSizes) recording the same ledger entries.
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <memory>
#include <vector>

#include "core/error.h"
#include "offload/host_pool.h"

using namespace zeroshard;

namespace {

// Counts allocations and forwards to pageable memory.
class CountingAllocator final : public HostAllocator {
 public:
  void* allocate(std::size_t bytes) override {
    ++allocs;
    return inner.allocate(bytes);
  }
  void deallocate(void* p, std::size_t bytes) noexcept override {
    ++frees;
    inner.deallocate(p, bytes);
  }
  bool pinned() const noexcept override { return true; }
  std::string_view name() const noexcept override { return "counting"; }
  std::atomic<int> allocs{0};
  std::atomic<int> frees{0};
  PageableHostAllocator inner;
};

bool aligned(const void* p, std::size_t a) { return reinterpret_cast<std::uintptr_t>(p) % a == 0; }

// Hands out pageable blocks 256 bytes past their start, as cudaHostAlloc
// does for small blocks; counts what it frees.
class MisalignedAllocator final : public HostAllocator {
 public:
  void* allocate(std::size_t bytes) override { return static_cast<std::byte*>(inner.allocate(bytes + 4096)) + 256; }
  void deallocate(void* p, std::size_t bytes) noexcept override {
    ++frees;
    inner.deallocate(static_cast<std::byte*>(p) - 256, bytes + 4096);
  }
  bool pinned() const noexcept override { return true; }
  std::string_view name() const noexcept override { return "misaligned"; }
  int frees = 0;
  PageableHostAllocator inner;
};

}  // namespace

TEST_CASE("size classes: 4 KiB below 2 MiB, 2 MiB from there") {
  CHECK(host_block_bytes(0) == 0);
  CHECK(host_block_bytes(1) == 4096);
  CHECK(host_block_bytes(4096) == 4096);
  CHECK(host_block_bytes(4097) == 8192);
  CHECK(host_block_bytes((2 << 20) - 1) == (2 << 20));
  CHECK(host_block_bytes((2 << 20) + 1) == (4 << 20));
}

TEST_CASE("acquire is aligned, accounted, and reuses released buffers") {
  MemoryLedger ledger;
  auto alloc = std::make_shared<CountingAllocator>();
  HostPool pool(ledger, alloc);
  CHECK(pool.allocator().pinned());
  std::byte* first = nullptr;
  {
    HostBuffer a = pool.acquire(1000, MemCategory::optimizer_states);
    REQUIRE(a.valid());
    CHECK(a.size() == 1000);
    CHECK(a.capacity() == 4096);
    CHECK(aligned(a.data(), 4096));
    CHECK(ledger.current(MemCategory::optimizer_states, MemTier::host) == 4096);
    CHECK(ledger.padding(MemCategory::optimizer_states) == 4096 - 1000);
    std::memset(a.data(), 7, a.capacity());
    first = a.data();
  }
  CHECK(ledger.current(MemCategory::optimizer_states, MemTier::host) == 0);
  CHECK(pool.cached_count() == 1);
  HostBuffer b = pool.acquire(3000, MemCategory::master_weights);
  CHECK(b.data() == first);  // reused, not reallocated
  CHECK(alloc->allocs == 1);
  CHECK(ledger.current(MemCategory::master_weights, MemTier::host) == 4096);
  // A request more than 2x smaller than the cached block allocates anew.
  HostBuffer big = pool.acquire(5 << 20, MemCategory::master_weights);
  CHECK(big.capacity() == (6 << 20));
  CHECK(aligned(big.data(), 2 << 20));
  big.release();
  HostBuffer small = pool.acquire(8192, MemCategory::master_weights);
  CHECK(small.data() != big.data());
  CHECK(alloc->allocs == 3);
  CHECK(pool.reserved_bytes() == 4096 + (6 << 20) + 8192);
  CHECK(pool.leased_bytes() == 4096 + 8192);
  CHECK(ledger.peak(MemCategory::master_weights) >= (6 << 20));
  pool.trim();
  CHECK(alloc->frees == 1);
  CHECK(pool.reserved_bytes() == 4096 + 8192);
  CHECK(pool.blocks().size() == 2);
}

TEST_CASE("reserve pre-allocates; zero bytes gives an empty buffer") {
  MemoryLedger ledger;
  auto alloc = std::make_shared<CountingAllocator>();
  HostPool pool(ledger, alloc);
  pool.reserve(3 << 20, 2);
  CHECK(alloc->allocs == 2);
  CHECK(pool.cached_count() == 2);
  HostBuffer a = pool.acquire(3 << 20, MemCategory::gradients);
  HostBuffer b = pool.acquire((3 << 20) - 100, MemCategory::gradients);
  CHECK(alloc->allocs == 2);
  CHECK(a.data() != b.data());
  HostBuffer none = pool.acquire(0, MemCategory::gradients);
  CHECK_FALSE(none.valid());
  CHECK(none.size() == 0);
}

TEST_CASE("a lease may outlive its pool") {
  auto alloc = std::make_shared<CountingAllocator>();
  HostBuffer survivor;
  {
    MemoryLedger ledger;
    HostPool pool(ledger, alloc);
    survivor = pool.acquire(100, MemCategory::parameters);
    HostBuffer cached = pool.acquire(100, MemCategory::parameters);
  }
  CHECK(alloc->frees == 1);  // the cached one
  std::memset(survivor.data(), 1, survivor.size());
  survivor.release();
  CHECK(alloc->frees == 2);
}

TEST_CASE("HostPoolSizes records what HostPool records for the same acquire/release sequence") {
  // Sizes around the 4 KiB classes, the 2x reuse limit and the 2 MiB
  // classes, leased and released in a fixed pseudo-random order.
  const std::size_t sizes[] = {1, 4096, 4097, 8191, 9000, 20000, 40000, 100, 2u << 20, (2u << 20) + 1, 3u << 20, 0};
  MemoryLedger real_ledger, model_ledger;
  HostPool pool(real_ledger);
  HostPoolSizes model(model_ledger);
  std::vector<HostBuffer> held;
  std::vector<HostLeaseSize> held_model;
  std::uint32_t x = 12345;
  auto next = [&x] { return x = x * 1664525u + 1013904223u; };
  for (int i = 0; i < 400; ++i) {
    if (!held.empty() && next() % 3 == 0) {
      const std::size_t k = next() % held.size();
      held[k].release();
      model.release(held_model[k]);
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(k));
      held_model.erase(held_model.begin() + static_cast<std::ptrdiff_t>(k));
      continue;
    }
    const std::size_t bytes = sizes[next() % std::size(sizes)];
    const auto cat = next() % 2 == 0 ? MemCategory::unsharded : MemCategory::optimizer_states;
    held.push_back(pool.acquire(bytes, cat));
    held_model.push_back(model.acquire(bytes, cat));
    REQUIRE(held.back().capacity() == held_model.back().capacity);
  }
  for (int c = 0; c < static_cast<int>(MemCategory::count); ++c) {
    const auto cat = static_cast<MemCategory>(c);
    CHECK(real_ledger.current(cat, MemTier::host) == model_ledger.current(cat, MemTier::host));
    CHECK(real_ledger.padding(cat) == model_ledger.padding(cat));
    CHECK(real_ledger.peak(cat) == model_ledger.peak(cat));
  }
  CHECK(real_ledger.peak_total() == model_ledger.peak_total());
  CHECK(real_ledger.peak_total() > 0);
  CHECK(pool.reserved_bytes() == model.reserved_bytes());
}

TEST_CASE("a block not 4 KiB aligned is refused where it is made, naming the allocator, and freed") {
  auto allocator = std::make_shared<MisalignedAllocator>();
  CHECK_THROWS_WITH_AS(HostBlock(allocator, 8192),
                       doctest::Contains("host allocator \"misaligned\" returned 8192 bytes"), InvariantError);
  CHECK(allocator->frees == 1);
}
