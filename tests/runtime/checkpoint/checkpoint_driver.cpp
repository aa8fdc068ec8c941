// Checkpoint driver for the re-sharding and kill tests (run by
// checkpoint_reshard.sh under mpirun at different world sizes):
//   checkpoint_driver save DIR STAGE     train 5 steps, save; rank 0 writes the
//                                        gathered masters+moments (DIR/ref-state.bin)
//                                        and, after one more step, the masters
//                                        (DIR/ref-next.bin)
//   checkpoint_driver load DIR STAGE     load at this world size and stage: masters and
//                                        moments must equal ref-state.bin bit for bit;
//                                        the next step must match ref-next.bin (1e-6)
//   checkpoint_driver pause DIR STAGE    save at step 2, then again at step 3 with the
//                                        pause hook set by the caller (killed there)
//   checkpoint_driver resave DIR STEPS   train STEPS steps, save as tag "fixed"; one more
//                                        step, save "fixed" again with the crash hook
//                                        (ZS_CHECKPOINT_CRASH_AT) set by the caller
//   checkpoint_driver async-resave DIR STEPS  as resave, the second save with
//                                        save_checkpoint_async, one more step during
//                                        its write, then wait_for_checkpoints()
//   checkpoint_driver latest DIR STEPS   `latest` loads and has STEPS optimizer steps
// ZS_CKPT_OPTIMIZER=Lion, Adagrad or Muon trains with that optimizer instead of AdamW;
// AdamW8bit with 8-bit states (block 64, every unit 8-bit). A load whose
// states are re-blocked (8-bit saved at another world size, or fp32 saved
// and loaded as 8-bit) checks the states within the quantization bound and
// skips the next-step check; 8-bit loaded as fp32 states is exact.
// AdamWbf16 / AdamWbf16sr: bf16 states rounded to nearest even /
// stochastically (seed 7). bf16 loaded as bf16 (any world size) or as fp32
// is exact; fp32 loaded as bf16 is checked within half a bf16 ulp (2^-8 of
// each value) and skips the next-step check.
// Exit code 0 on success, 1 with a message on the first mismatch.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <fmt/format.h>

// A plain program: doctest's macros in the shared helpers compile to nothing.
#define DOCTEST_CONFIG_DISABLE
#include <doctest/doctest.h>

#include "core/error.h"
#include "tests/support/ckpt_model.h"
#include "tests/support/test_world.h"

using namespace zeroshard;
using namespace zeroshard::testing;

namespace {

// AdamW, or the optimizer ZS_CKPT_OPTIMIZER names ("Lion", "Adagrad", "Muon", ...).
EngineConfig config(int stage) {
  OptimizerHyper h;
  h.kind = OptimizerKind::adamw;
  h.lr = 1e-2f;
  h.weight_decay = 0.05f;
  const char* name = std::getenv("ZS_CKPT_OPTIMIZER");
  const std::string opt = name != nullptr ? name : "";
  if (opt == "Lion") h.kind = OptimizerKind::lion;
  if (opt == "AdamW8bit") {
    h.states.dtype = StateDtype::q8;
    h.states.block_size = 64;
    h.states.min_8bit_size = 0;
  }
  if (opt == "AdamWbf16" || opt == "AdamWbf16sr") {
    h.states.dtype = StateDtype::bf16;
    h.states.rounding = opt == "AdamWbf16sr" ? StateRounding::stochastic : StateRounding::nearest;
    h.states.seed = 7;
  }
  if (opt == "Adagrad") {
    h.kind = OptimizerKind::adagrad;
    h.lr_decay = 0.1;
  }
  if (opt == "Muon") {  // b.weight (7 x 5) is Muon's, the rest AdamW's
    h.kind = OptimizerKind::muon;
    h.muon.lr = 0.02;
    h.muon.params = {"b.weight"};
  }
  if (!opt.empty() && opt != "AdamW" && opt != "AdamW8bit" && opt != "AdamWbf16" && opt != "AdamWbf16sr" &&
      h.kind == OptimizerKind::adamw) {
    throw ConfigError("ZS_CKPT_OPTIMIZER: unknown " + opt);
  }
  return make_config(stage, h);
}

void write_floats(const std::string& path, const std::vector<float>& v) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(v.data()),
                                              static_cast<std::streamsize>(v.size() * sizeof(float)));
}

std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw IoError("cannot open " + path);
  std::vector<float> v(static_cast<std::size_t>(in.tellg()) / sizeof(float));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(float)));
  return v;
}

std::vector<float> masters(Engine& e, const CkptModel& m) {
  std::vector<float> out;
  for (ParamId p : m.params) {
    const auto v = e.gather_master(p);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

int run(const std::string& mode, const std::string& dir, int arg) {
  Communicator& comm = world();
  const bool root = comm.rank() == 0;
  if (mode == "save") {
    Engine e(config(arg), comm);
    CkptModel m(e);
    for (int s = 1; s <= 5; ++s) m.train_step(e, s);
    e.save_checkpoint(dir, {{"saved_by", comm.world_size()},
                            {"state_format", std::string(state_dtype_name(e.config().optimizer.states.dtype))}});
    const std::vector<float> state = m.state(e);
    m.train_step(e, 6);
    const std::vector<float> next = masters(e, m);
    if (root) {
      write_floats(dir + "/ref-state.bin", state);
      write_floats(dir + "/ref-next.bin", next);
    }
    return 0;
  }
  if (mode == "load") {
    Engine e(config(arg), comm);
    CkptModel m(e);
    const nlohmann::json client = e.load_checkpoint(dir);
    const std::vector<float> want_state = read_floats(dir + "/ref-state.bin");
    const std::string saved_format = client.value("state_format", "fp32");
    const bool q8 = e.config().optimizer.states.dtype == StateDtype::q8;
    // Re-blocked 8-bit states: within the maps' bound of the saved values.
    const bool reblocked = q8 && (saved_format != "8bit" || client.at("saved_by").get<int>() != comm.world_size());
    // fp32 states loaded as bf16: each rounded to nearest even.
    const bool rounded = e.config().optimizer.states.dtype == StateDtype::bf16 && saved_format != "bf16";
    const std::vector<float> got_state = m.state(e);
    if (rounded) {
      for (std::size_t i = 0; i < want_state.size(); ++i) {
        if (!(std::fabs(got_state[i] - want_state[i]) <= 0x1p-8f * std::fabs(want_state[i]))) {
          std::fprintf(stderr, "rank %d: rounded state element %zu: %.9g vs %.9g\n", comm.rank(), i, got_state[i],
                       want_state[i]);
          return 1;
        }
      }
    } else if (reblocked) {
      float top = 0;
      for (float x : want_state) top = std::max(top, std::fabs(x));
      for (std::size_t i = 0; i < want_state.size(); ++i) {
        if (!(std::fabs(got_state[i] - want_state[i]) <= 0.0071f * top)) {
          std::fprintf(stderr, "rank %d: re-blocked state element %zu: %.9g vs %.9g\n", comm.rank(), i, got_state[i],
                       want_state[i]);
          return 1;
        }
      }
    } else if (got_state != want_state) {
      std::fprintf(stderr, "rank %d: loaded masters/moments differ from the saved ones\n", comm.rank());
      return 1;
    }
    if (e.optimizer_steps() != 5) {
      std::fprintf(stderr, "optimizer step %ld after load, want 5\n", static_cast<long>(e.optimizer_steps()));
      return 1;
    }
    if (reblocked || rounded || saved_format != std::string(state_dtype_name(e.config().optimizer.states.dtype))) {
      if (root) std::printf("load OK (%s states as %s): saved by %d ranks, loaded by %d\n", saved_format.c_str(),
                            std::string(state_dtype_name(e.config().optimizer.states.dtype)).c_str(),
                            client.at("saved_by").get<int>(), comm.world_size());
      return 0;
    }
    m.train_step(e, 6);
    const std::vector<float> got = masters(e, m), want = read_floats(dir + "/ref-next.bin");
    // Muon: the reduced gradient's last bits at another world size go
    // through Newton-Schulz, which amplifies them up to a^5 = 487 for small
    // singular values ([Note: Newton-Schulz iteration]): 1e-4 of the step
    // lr 0.02 on top.
    const double floor = e.config().optimizer.kind == OptimizerKind::muon ? 0.02 * 1e-4 : 1e-9;
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (!close(got[i], want[i], 1e-6, floor)) {
        std::fprintf(stderr, "next step element %zu: %.9g vs %.9g (saved by %d ranks)\n", i, got[i], want[i],
                     client.at("saved_by").get<int>());
        return 1;
      }
    }
    if (root) std::printf("load OK: saved by %d ranks, loaded by %d\n", client.at("saved_by").get<int>(), comm.world_size());
    return 0;
  }
  if (mode == "pause") {
    Engine e(config(arg), comm);
    CkptModel m(e);
    m.train_step(e, 1);
    m.train_step(e, 2);
    const char* hook = std::getenv("ZS_CHECKPOINT_PAUSE_RANK");
    unsetenv("ZS_CHECKPOINT_PAUSE_RANK");
    e.save_checkpoint(dir, {});
    if (hook != nullptr) setenv("ZS_CHECKPOINT_PAUSE_RANK", hook, 1);
    m.train_step(e, 3);
    e.save_checkpoint(dir, {});  // the hooked rank stops in here; the test kills the job
    return 0;
  }
  if (mode == "resave" || mode == "async-resave") {
    Engine e(config(3), comm);
    CkptModel m(e);
    for (int s = 1; s <= arg; ++s) m.train_step(e, s);
    const char* hook = std::getenv("ZS_CHECKPOINT_CRASH_AT");
    const std::string point = hook != nullptr ? hook : "";
    unsetenv("ZS_CHECKPOINT_CRASH_AT");
    e.save_checkpoint(dir, {}, 0, "fixed");
    if (!point.empty()) setenv("ZS_CHECKPOINT_CRASH_AT", point.c_str(), 1);
    m.train_step(e, arg + 1);
    if (mode == "resave") {
      e.save_checkpoint(dir, {}, 0, "fixed");  // rank 0 kills itself in here when hooked
      return 0;
    }
    // Rank 0 kills itself in the snapshot, its writer thread, or the commit
    // (in the next step or in wait_for_checkpoints).
    e.save_checkpoint_async(dir, {}, 0, "fixed");
    m.train_step(e, arg + 2);
    e.wait_for_checkpoints();
    return 0;
  }
  if (mode == "latest") {
    Engine e(config(1), comm);
    CkptModel m(e);
    e.load_checkpoint(dir);
    if (e.optimizer_steps() != arg) {
      std::fprintf(stderr, "latest checkpoint has %ld steps, want %d\n", static_cast<long>(e.optimizer_steps()), arg);
      return 1;
    }
    return 0;
  }
  std::fprintf(stderr, "unknown mode %s\n", mode.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s save|load|pause|resave|async-resave|latest DIR N\n", argv[0]);
    return 2;
  }
  try {
    return run(argv[1], argv[2], std::atoi(argv[3]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", world().rank(), e.what());
    return 1;
  }
}
