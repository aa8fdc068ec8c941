// The GPT example at a mid size (16 blocks of width 512, context 16: 50,578,432
// parameters) at ZeRO stage 3 with bf16 parameters and fp32 master weights
// and states, its parameters and optimizer state in swap files
// (offload_param and offload_optimizer on nvme, several sub-groups per
// unit, activation checkpointing on), against the same run held in memory:
// the offload tiers only move bytes, so three steps' losses, gradient norms
// and final parameters are bitwise equal (issue: train what does not fit).
#include <doctest/doctest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "comm/mesh.h"
#include "examples/gpt/gpt_model.h"
#include "examples/gpt/text_corpus.h"
#include "runtime/engine/engine.h"
#include "tests/examples/gpt_test_support.h"
#include "tests/support/scratch_files.h"

namespace zeroshard::examples {
namespace {

using namespace gpt_testing;  // world, GptEngine, my_rows, check_same_run

constexpr int kBatch = 4, kSeq = 16, kSteps = 3;
const GptShape kShape{.layers = 16, .heads = 8, .dim = 512, .context = 16, .vocab = 256};

struct Run {
  std::vector<double> losses, norms;
  std::vector<std::vector<float>> params;
  std::uint64_t in_memory = 0, nvme = 0;  // ledger bytes after finalize
};

Run train(const Mesh& mesh, const std::filesystem::path* swap) {
  EngineConfig c = gpt_test_adamw(3, 1);
  c.compute_dtype = DType::bf16;
  // A block's 3.1M elements in several sub-groups, in both runs: every tier
  // sums the gradient norm sub-group by sub-group, so the two runs' norms
  // add the same partial sums only with the same sub-group size.
  c.offload.sub_group_size = 1'000'000;
  if (swap != nullptr) {
    c.offload.optimizer.device = OffloadDevice::nvme;
    c.offload.optimizer.nvme_path = swap->string();
    c.offload.param.device = OffloadDevice::nvme;
    c.offload.param.nvme_path = swap->string();
    c.offload.param.max_in_cpu = 0;
  }
  GptEngine g(c, mesh, kShape);
  g.gpt.set_activation_checkpointing(swap != nullptr);
  g.gpt.initialize(11);
  Run run;
  run.in_memory = g.engine.ledger().current_total(MemTier::host) + g.engine.ledger().current_total(MemTier::device);
  run.nvme = g.engine.ledger().current_total(MemTier::nvme);
  const std::string text =
      "a mid-size model whose parameters and optimizer state live in swap files trains the same as in memory. ";
  for (int s = 0; s < kSteps; ++s) {
    const auto global = fixed_windows(text, s * kBatch, kBatch, kSteps * kBatch, kSeq);
    run.losses.push_back(
        g.gpt.train_micro_batch(my_rows(global, mesh, kBatch, kSeq), kBatch / mesh.dp_size(), kSeq, 1.0));
    run.norms.push_back(g.engine.step().grad_norm);
  }
  for (const std::string& name : g.gpt.parameter_names()) run.params.push_back(g.gpt.full_parameter(name));
  return run;
}

}  // namespace

TEST_CASE("a 5e7-parameter GPT with parameters and state on nvme trains bitwise as in memory (stage 3, bf16)") {
  const int n = world().world_size();
  if (kBatch % n != 0) return;
  Mesh mesh(world(), MeshShape{n, 1});
  const Run ref = train(mesh, nullptr);
  const std::filesystem::path swap = std::filesystem::temp_directory_path() / "zs-test-gpt-nvme";
  testing::make_empty_dir_on_rank0(world(), swap);
  const Run got = train(mesh, &swap);
  testing::remove_dir_on_rank0(world(), swap);
  CHECK(ref.losses.back() < ref.losses.front());  // it learns
  check_same_run(got.losses, got.norms, got.params, ref.losses, ref.norms, ref.params);
  std::size_t elements = 0;
  for (const auto& p : ref.params) elements += p.size();
  CHECK(elements == 50578432);  // 16 (12 D^2 + 13 D) + (256 + 16 + 2) D
  // In memory the model states are host bytes; offloaded, they are on nvme.
  CHECK(ref.nvme == 0);
  CHECK(got.nvme > 0);
  CHECK(got.in_memory < ref.in_memory);
}

}  // namespace zeroshard::examples
