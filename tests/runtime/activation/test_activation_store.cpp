// ActivationStore (runtime/activation/activation_store.h) at world sizes 1-4,
// the world as the tensor-parallel group: checkpoints of 0, 1, 7, 57 and
// 10001 elements restored bit for bit, kept whole or partitioned (each rank
// holding ceil(n / t) elements, [Note: partitioned activations]), the
// ledger's "activation checkpoints" bytes, and the errors: a released or
// unknown handle, a restore of the wrong size, ranks that save or restore
// different sizes (the same error on every rank, no hang).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/memory_ledger.h"
#include "runtime/activation/activation_store.h"
#include "tests/support/same_bits.h"
#include "tests/support/test_world.h"
#include "tests/support/thrown.h"

namespace zeroshard {
namespace {

using testing::contains;
using testing::error_message;
using testing::same_bits;
using testing::world;

const std::size_t kSizes[] = {0, 1, 7, 57, 10001};

// Values that differ in every element and per checkpoint (the same on every rank).
std::vector<float> values(std::size_t n, int salt) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::sin(0.37f * static_cast<float>(i) + static_cast<float>(salt)) * 3.0f;
  return v;
}

ActivationCheckpointingConfig partitioned(bool on) { return ActivationCheckpointingConfig{.partition_activations = on}; }

}  // namespace

TEST_CASE("checkpoints come back bit for bit, whole or partitioned, with their bytes in the ledger") {
  const int t = world().world_size();
  for (bool partition : {false, true}) {
    CAPTURE(partition);
    MemoryLedger ledger;
    ActivationStore store(partitioned(partition), &world(), ledger);
    CHECK(store.partitioned() == (partition && t > 1));
    std::vector<ActivationHandle> handles;
    std::size_t expected = 0;
    int salt = 0;
    for (std::size_t n : kSizes) {
      const ActivationHandle h = store.save(values(n, salt++));
      REQUIRE(h.valid());
      const std::size_t held = store.partitioned() ? (n + static_cast<std::size_t>(t) - 1) / static_cast<std::size_t>(t) : n;
      CHECK(store.held_bytes(h) == held * sizeof(float));
      expected += held * sizeof(float);
      handles.push_back(h);
    }
    CHECK(store.count() == 5);
    CHECK(store.bytes() == expected);
    CHECK(ledger.current(MemCategory::activations, MemTier::device) == expected);
    // Restored in another order than saved, twice each (a restore keeps the checkpoint).
    for (int pass = 0; pass < 2; ++pass) {
      for (std::size_t k = handles.size(); k-- > 0;) {
        CAPTURE(kSizes[k]);
        std::vector<float> out(kSizes[k], -1.0f);
        store.restore(handles[k], out);
        CHECK(same_bits(out, values(kSizes[k], static_cast<int>(k))));
      }
    }
    for (ActivationHandle h : handles) store.release(h);
    CHECK(store.count() == 0);
    CHECK(store.bytes() == 0);
    CHECK(store.peak_bytes() == expected);
    CHECK(ledger.current(MemCategory::activations) == 0);
    CHECK(ledger.peak(MemCategory::activations) == expected);
  }
}

TEST_CASE("partitioning holds 1/t of the checkpoint: 10001 elements over t ranks") {
  const int t = world().world_size();
  MemoryLedger whole_ledger, part_ledger;
  ActivationStore whole(partitioned(false), &world(), whole_ledger), part(partitioned(true), &world(), part_ledger);
  const ActivationHandle a = whole.save(values(10001, 3)), b = part.save(values(10001, 3));
  CHECK(whole.held_bytes(a) == 10001 * sizeof(float));
  CHECK(part.held_bytes(b) == (10001 + static_cast<std::size_t>(t) - 1) / static_cast<std::size_t>(t) * sizeof(float));
  // No group, or partition off: kept whole whatever the world.
  MemoryLedger l;
  ActivationStore alone(partitioned(true), nullptr, l);
  CHECK(!alone.partitioned());
  CHECK(alone.held_bytes(alone.save(values(57, 1))) == 57 * sizeof(float));
  whole.release(a);
  part.release(b);
}

TEST_CASE("a released or unknown handle and a restore of the wrong size are errors") {
  for (bool partition : {false, true}) {
    CAPTURE(partition);
    MemoryLedger ledger;
    ActivationStore store(partitioned(partition), &world(), ledger);
    const ActivationHandle h = store.save(values(57, 0));
    std::vector<float> wrong(56);
    CHECK(contains(error_message<InvariantError>([&] { store.restore(h, wrong); }), "activation checkpoint"));
    store.release(h);
    CHECK(contains(error_message<InvariantError>([&] { store.release(h); }), "released twice or never saved"));
    std::vector<float> out(57);
    const std::string e = error_message<InvariantError>([&] { store.restore(h, out); });
    CHECK(contains(e, store.partitioned() ? "no such checkpoint" : "no such checkpoint (released?)"));
    CHECK(ledger.current(MemCategory::activations) == 0);
  }
}

TEST_CASE("ranks that disagree are named on every rank instead of waiting") {
  const int t = world().world_size(), r = world().rank();
  if (t < 2) return;
  MemoryLedger ledger;
  ActivationStore store(partitioned(true), &world(), ledger);
  // The last rank saves one element more: every rank throws the same InvariantError.
  const std::size_t n = r == t - 1 ? 8 : 7;
  const std::string e = error_message<InvariantError>([&] { store.save(values(n, 0)); });
  CHECK(contains(e, "save different sizes"));
  CHECK(contains(e, fmt::format("tensor-parallel rank {} (8 elements)", t - 1)));
  CHECK(store.count() == 0);
  // Rank 0 restores into a buffer of another size: every rank throws, naming rank 0's size.
  const ActivationHandle h = store.save(values(57, 1));
  std::vector<float> out(r == 0 ? 58 : 57);
  const std::string f = error_message<InvariantError>([&] { store.restore(h, out); });
  CHECK(contains(f, "cannot restore it"));
  CHECK(contains(f, "rank 0 has 58 elements"));
  // The store is still usable: the right size restores.
  std::vector<float> good(57);
  store.restore(h, good);
  CHECK(same_bits(good, values(57, 1)));
  store.release(h);
}

}  // namespace zeroshard
