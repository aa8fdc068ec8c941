// ArrayStore (runtime/sharding/array_store.h) alone, without an Engine: units of
// [N, 7, N] elements for N in 0, 1, 7, 57, 10001, laid out for this run's
// world size (the store is local; the world size sets the shards, padding
// and which ranks hold empty shards). Checked on every stage and tier
// (device, host, nvme; parameters on each tier at stage 3):
//   - sizes: each array's element count, dtype and tier in closed form, and
//     the ledger's bytes per category and tier equal to their sum;
//   - store then read gives back the same bytes (nvme: across 4096-element
//     sub-groups), and a fresh array reads as zeros;
//   - gradient shards accumulated block by block over two micro-batches
//     equal a plain accumulate_cast reference bit for bit, and their
//     statistics (sum of squares, Inf/NaN count) are the same bits on every
//     tier; clearing leaves zeros;
//   - the stage 3 parameter swap-in returns the stored shard and respects
//     offload_param.buffer_count;
//   - errors: a deferred nvme write error surfaces once at
//     finish_reductions(), a shard above offload_param.buffer_size and an
//     unusable nvme_path are named.
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <vector>

#include <doctest/doctest.h>
#include <fmt/format.h>

#include "core/error.h"
#include "kernels/cpu/cast.h"
#include "offload/io/fault_injection.h"
#include "runtime/sharding/array_store.h"
#include "tests/support/component_layout.h"
#include "tests/support/test_world.h"
#include "zs_config.h"

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

constexpr const auto& kSizes = kComponentSizes;
constexpr OffloadDevice kTiers[] = {OffloadDevice::none, OffloadDevice::cpu, OffloadDevice::nvme};

fs::path swap_root() { return fs::temp_directory_path() / fmt::format("zs-test-array-store-{}", ::getpid()); }

ArrayStoreOptions make_options(int stage, DType dt, OffloadDevice opt, OffloadDevice param) {
  ArrayStoreOptions o;
  o.stage = stage;
  o.rank = world().rank();
  o.dtype = dt;
  o.grad_accum_dtype = dt;  // the gradient in the compute dtype (the engine's grad_accum_dtype opt-in)
  o.state_count = 2;
  o.offload.optimizer.device = opt;
  o.offload.optimizer.nvme_path = (swap_root() / "opt").string();
  o.offload.param.device = param;
  o.offload.param.nvme_path = (swap_root() / "param").string();
  o.offload.param.buffer_count = 2;
  o.offload.param.max_in_cpu = 0;  // every non-empty nvme parameter shard in swap files
  o.offload.sub_group_size = 4096;  // several sub-groups for the 10001-element units
  o.source = "test";
  return o;
}

std::vector<ArrayRef> all_arrays(const ArrayStoreOptions& o) {
  std::vector<ArrayRef> out{{ArrayKind::params}, {ArrayKind::grad}};
  if (o.mixed()) out.push_back({ArrayKind::master});
  for (int k = 0; k < o.state_count; ++k) out.push_back({ArrayKind::state, k});
  return out;
}

// Bytes that differ from `pattern` salt in numel*e bytes.
std::vector<std::byte> pattern(std::size_t bytes, int salt) {
  std::vector<std::byte> v(bytes);
  for (std::size_t k = 0; k < bytes; ++k) v[k] = static_cast<std::byte>((7 * k + 31 * static_cast<std::size_t>(salt) + 3) & 0x7f);
  return v;
}

MemTier tier_of(OffloadDevice d) {
  return d == OffloadDevice::none ? MemTier::device : d == OffloadDevice::cpu ? MemTier::host : MemTier::nvme;
}

std::string describe(const ArrayStoreOptions& o, std::size_t n) {
  return fmt::format("stage {} {} opt {} param {} N {} rank {}/{}", o.stage, dtype_name(o.dtype),
                     static_cast<int>(o.offload.optimizer.device), static_cast<int>(o.offload.param.device), n,
                     world().rank(), world().world_size());
}


// Runs f(store, layout, options, ledger) on a fresh store for every unit
// size and every (stage, dtype, optimizer tier, parameter tier) the store
// supports; removes the swap files afterwards.
template <class F>
void for_each_store(F&& f) {
  for (std::size_t n : kSizes) {
    const FlatLayout l = component_layout(n, world().world_size());
    for (int stage = 0; stage <= 3; ++stage) {
      for (DType dt : {DType::f32, DType::bf16}) {
        for (OffloadDevice opt : kTiers) {
          if (stage == 0 && opt != OffloadDevice::none) continue;
          for (OffloadDevice param : kTiers) {
            if (param != OffloadDevice::none && (stage != 3 || opt == OffloadDevice::none)) continue;
            const ArrayStoreOptions o = make_options(stage, dt, opt, param);
            INFO(describe(o, n));
            MemoryLedger ledger;
            auto ops = make_cpu_ops();
            ArrayStore store(l, *ops, ledger, o);
            f(store, l, o, ledger);
          }
        }
      }
    }
  }
  std::error_code ec;
  fs::remove_all(swap_root(), ec);
}

}  // namespace

TEST_CASE("array store: sizes, tiers and ledger in closed form") {
  for_each_store([](ArrayStore& store, const FlatLayout& l, const ArrayStoreOptions& o, MemoryLedger& ledger) {
    std::uint64_t want[4][3] = {};  // parameters, gradients, master, states x tiers
    for (UnitId u = 0; u < 3; ++u) {
      const UnitInfo& info = l.unit(u);
      const bool empty = info.shard == 0;
      for (ArrayRef a : all_arrays(o)) {
        std::size_t numel = 0;
        MemTier tier = MemTier::device;
        int cat = 0;
        switch (a.kind) {
          case ArrayKind::params:
            numel = o.stage < 3 ? info.padded : info.shard;
            tier = o.stage == 3 && !empty ? tier_of(o.offload.param.device) : MemTier::device;
            cat = 0;
            break;
          case ArrayKind::grad:
            numel = o.stage < 2 ? info.padded : info.shard;
            tier = o.stage >= 2 && !empty ? tier_of(o.offload.optimizer.device) : MemTier::device;
            cat = 1;
            break;
          default:
            numel = o.stage == 0 ? info.padded : info.shard;
            tier = o.stage >= 1 && !empty ? tier_of(o.offload.optimizer.device) : MemTier::device;
            cat = a.kind == ArrayKind::master ? 2 : 3;
        }
        CHECK(store.numel(u, a) == numel);
        CHECK(store.tier(u, a) == tier);
        const DType t = a.kind == ArrayKind::params || a.kind == ArrayKind::grad ? o.dtype : DType::f32;
        CHECK(store.dtype(u, a) == t);
        CHECK((store.resident(u, a) != nullptr) == (tier != MemTier::nvme && numel > 0));
        want[cat][static_cast<int>(tier)] += numel * dtype_size(t);
      }
      const std::size_t sg = o.offload.sub_group_elements();
      CHECK(store.subgroups(u).size() == (info.shard + sg - 1) / sg);
    }
    const MemCategory cats[] = {MemCategory::parameters, MemCategory::gradients, MemCategory::master_weights,
                                MemCategory::optimizer_states};
    for (int c = 0; c < 4; ++c) {
      for (int t = 0; t < 3; ++t) CHECK(ledger.current(cats[c], static_cast<MemTier>(t)) == want[c][t]);
    }
    CHECK(store.uses_nvme() == o.offload.uses_nvme());
  });
}

TEST_CASE("array store: store then read gives back the same bytes on every tier") {
  for_each_store([](ArrayStore& store, const FlatLayout&, const ArrayStoreOptions& o, MemoryLedger&) {
    int salt = 0;
    for (UnitId u = 0; u < 3; ++u) {
      for (ArrayRef a : all_arrays(o)) {
        const std::size_t bytes = store.numel(u, a) * dtype_size(store.dtype(u, a));
        HostBuffer h0;
        const auto* fresh = static_cast<const std::byte*>(store.read(u, a, h0));
        CHECK(std::vector<std::byte>(fresh, fresh + bytes) == std::vector<std::byte>(bytes));
        const std::vector<std::byte> v = pattern(bytes, ++salt);
        store.store(u, a, v.data());
        HostBuffer h1;
        const auto* back = static_cast<const std::byte*>(store.read(u, a, h1));
        CHECK_MESSAGE(std::vector<std::byte>(back, back + bytes) == v, "unit ", u, " array ",
                      static_cast<int>(a.kind), ".", a.state);
      }
    }
  });
}

TEST_CASE("array store: gradient shards accumulate and give the same statistics on every tier") {
  for (std::size_t n : kSizes) {
    const FlatLayout l = component_layout(n, world().world_size());
    for (int stage : {2, 3}) {
      for (DType dt : {DType::f32, DType::bf16}) {
        std::vector<kernels::GradStats> first_tier;  // per unit, on the device tier
        for (OffloadDevice opt : kTiers) {
          const ArrayStoreOptions o = make_options(stage, dt, opt, OffloadDevice::none);
          INFO(describe(o, n));
          MemoryLedger ledger;
          auto ops = make_cpu_ops();
          ArrayStore store(l, *ops, ledger, o);
          for (UnitId u = 0; u < 3; ++u) {
            const std::size_t shard = l.unit(u).shard;
            // Two micro-batches of reduced blocks in f32 (the last makes one
            // value non-finite when the shard is large enough), each split
            // into pieces of 1, 5 and the rest, crossing sub-groups.
            std::vector<std::byte> want(shard * dtype_size(dt));
            for (int micro = 0; micro < 2; ++micro) {
              std::vector<float> block(shard);
              for (std::size_t k = 0; k < shard; ++k) block[k] = static_cast<float>((k % 13) + 1) * (micro ? -0.25f : 0.5f);
              if (micro == 1 && shard > 100) block[100] = INFINITY;
              kernels::accumulate_cast(want.data(), dt, block.data(), DType::f32, shard, 0.5f);
              std::size_t at = 0;
              for (std::size_t piece : {std::size_t{1}, std::size_t{5}, shard}) {
                const std::size_t len = std::min(piece, shard - at);
                store.accumulate_grad_shard(u, at, block.data() + at, DType::f32, len, 0.5f, micro == 1);
                at += len;
              }
            }
            store.finish_reductions();
            HostBuffer h;
            const auto* got = static_cast<const std::byte*>(store.read(u, {ArrayKind::grad}, h));
            CHECK(std::vector<std::byte>(got, got + want.size()) == want);
            // Reference statistics: sub-group by sub-group, in order.
            kernels::GradStats ref;
            for (const SubGroup& sg : store.subgroups(u)) {
              const auto st = kernels::grad_stats(want.data() + sg.begin * dtype_size(dt), dt, sg.end - sg.begin);
              ref.sum_of_squares += st.sum_of_squares;
              ref.nonfinite += st.nonfinite;
            }
            const kernels::GradStats st = store.grad_stats(u);
            CHECK(std::memcmp(&st.sum_of_squares, &ref.sum_of_squares, sizeof(double)) == 0);
            CHECK(st.nonfinite == ref.nonfinite);
            CHECK((st.nonfinite > 0) == (shard > 100));
            if (opt == OffloadDevice::none) {
              first_tier.push_back(st);
            } else {
              CHECK(std::memcmp(&st.sum_of_squares, &first_tier[static_cast<std::size_t>(u)].sum_of_squares,
                                sizeof(double)) == 0);
            }
          }
          // The next cycle starts from zeros.
          for (UnitId u = 0; u < 3; ++u) store.zero_grads(u);
          store.clear_nvme_grads();
          for (UnitId u = 0; u < 3; ++u) {
            HostBuffer h;
            const std::size_t bytes = l.unit(u).shard * dtype_size(dt);
            const auto* got = static_cast<const std::byte*>(store.read(u, {ArrayKind::grad}, h));
            CHECK(std::vector<std::byte>(got, got + bytes) == std::vector<std::byte>(bytes));
            CHECK(store.grad_stats(u).sum_of_squares == 0.0);
          }
        }
      }
    }
  }
  std::error_code ec;
  fs::remove_all(swap_root(), ec);
}

TEST_CASE("array store: stage 3 parameter swap-in returns the stored shard within buffer_count") {
  for (std::size_t n : kSizes) {
    const FlatLayout l = component_layout(n, world().world_size());
    for (OffloadDevice param : kTiers) {
      const ArrayStoreOptions o = make_options(3, DType::bf16, OffloadDevice::cpu, param);
      INFO(describe(o, n));
      MemoryLedger ledger;
      auto ops = make_cpu_ops();
      ArrayStore store(l, *ops, ledger, o);
      std::vector<std::vector<std::byte>> values;
      for (UnitId u = 0; u < 3; ++u) {
        values.push_back(pattern(l.unit(u).shard * 2, 100 + u));
        store.store(u, {ArrayKind::params}, values.back().data());
      }
      int swapped = 0;  // units whose shard is on nvme: they take a swap-in buffer
      for (UnitId u = 0; u < 3; ++u) {
        const bool nvme = store.tier(u, {ArrayKind::params}) == MemTier::nvme;
        const bool limited = nvme && swapped == o.offload.param.buffer_count;
        if (limited) {
          CHECK_FALSE(store.start_param_fetch(u, false));
          CHECK_THROWS_AS(store.start_param_fetch(u, true), InvariantError);
          store.release_param_staging(0);  // a buffer comes back
          --swapped;
        }
        CHECK(store.start_param_fetch(u, true));
        if (nvme) ++swapped;
        CHECK(store.param_staging_count() == swapped);
        const auto* got = static_cast<const std::byte*>(store.param_source(u));
        CHECK(std::vector<std::byte>(got, got + values[static_cast<std::size_t>(u)].size()) ==
              values[static_cast<std::size_t>(u)]);
      }
      for (UnitId u = 0; u < 3; ++u) store.release_param_staging(u);
      CHECK(store.param_staging_count() == 0);
    }
  }
  std::error_code ec;
  fs::remove_all(swap_root(), ec);
}

TEST_CASE("array store: errors are named and leave nothing behind") {
  const FlatLayout l = component_layout(10001, world().world_size());
  MemoryLedger ledger;
  auto ops = make_cpu_ops();
  SUBCASE("a parameter shard above offload_param.buffer_size") {
    ArrayStoreOptions o = make_options(3, DType::f32, OffloadDevice::nvme, OffloadDevice::nvme);
    o.offload.param.buffer_size = 8;
    CHECK_THROWS_WITH_AS(ArrayStore(l, *ops, ledger, o), doctest::Contains("unit \"u0\" has a parameter shard"),
                         ConfigError);
  }
  SUBCASE("an nvme_path that cannot hold a folder") {
    ArrayStoreOptions o = make_options(2, DType::f32, OffloadDevice::nvme, OffloadDevice::none);
    o.offload.optimizer.nvme_path = "/proc/zs-no-such-folder";
    CHECK_THROWS_WITH_AS(ArrayStore(l, *ops, ledger, o),
                         doctest::Contains("zero_optimization.offload_optimizer.nvme_path"), IoError);
  }
  SUBCASE("gradients at stage 1 are not sharded; unknown units") {
    ArrayStore store(l, *ops, ledger, make_options(1, DType::f32, OffloadDevice::none, OffloadDevice::none));
    float x = 1;
    CHECK_THROWS_AS(store.accumulate_grad_shard(0, 0, &x, DType::f32, 1, 1.0f, true), InvariantError);
    CHECK_THROWS_AS(store.numel(3, {ArrayKind::params}), InvariantError);
  }
#if ZS_TEST_HOOKS
  SUBCASE("an nvme gradient write error is kept and thrown once by finish_reductions") {
    ArrayStore store(l, *ops, ledger, make_options(2, DType::f32, OffloadDevice::nvme, OffloadDevice::none));
    const std::size_t shard = l.unit(0).shard;
    std::vector<float> block(shard, 1.0f);
    inject_io_fault(IoFault{.op = IoOp::write, .nth = 1, .err = EIO});
    // Two sub-groups of unit 0: moving to the second writes the first back.
    CHECK_NOTHROW(store.accumulate_grad_shard(0, 0, block.data(), DType::f32, shard, 1.0f, true));
    CHECK_NOTHROW(store.accumulate_grad_shard(2, 0, block.data(), DType::f32, shard, 1.0f, true));
    CHECK_THROWS_AS(store.finish_reductions(), IoError);
    clear_io_fault();
    CHECK_NOTHROW(store.finish_reductions());
  }
#endif
  std::error_code ec;
  const bool left = fs::exists(swap_root() / "opt") && !fs::is_empty(swap_root() / "opt");
  CHECK_FALSE(left);
  fs::remove_all(swap_root(), ec);
}
