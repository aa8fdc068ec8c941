// Agreed storage phases of the engine's collective calls, and the unusable
// state a failed one leaves behind.
//
// [Note: storage phases]
// set_parameter, load_checkpoint's commit and step()'s offload phases (the
// gradient shards' swap writes, the optimizer update through the swap
// pipeline) write the engine's state on each rank alone (swap files on nvme, resident buffers). A write that fails
// on one rank would leave the others in their next collective forever, and
// a state that some rank has partly replaced. So the phase's outcome is
// agreed (run_agreed, [Note: agreeing on errors] in
// comm/collective_error.h): every rank throws the same AgreedError, and
// the engine is marked unusable (EngineState::unusable) since its state is
// no longer the one any rank had before or meant to write. unshard(),
// step() and save_checkpoint() then refuse with an Error that says why; a
// load_checkpoint that succeeds makes the engine usable again.
#pragma once

#include <string>

#include <fmt/format.h>

#include "core/error.h"
#include "comm/collective_error.h"
#include "runtime/engine/engine_state.h"

namespace zeroshard {

/// Runs f(), a phase of the collective call `what` that writes engine
/// state on this rank. When `always_agree` is set or the configuration
/// keeps state on nvme (the same on every rank), the outcome is agreed
/// across the host communicator: a failure on any rank throws the same
/// AgreedError on every rank and sets s.unusable. Otherwise (memory writes
/// only) f's exceptions propagate as they are. Collective in the agreed
/// case.
template <class F>
void run_storage_phase(EngineState& s, const std::string& what, F&& f, bool always_agree = false) {
  if (!always_agree && !s.config.offload.uses_nvme()) {
    f();
    return;
  }
  try {
    run_agreed(s.comms.host(), f);
  } catch (const AgreedError&) {
    s.unusable = fmt::format("{} failed on some rank and left the engine's state partly written", what);
    throw;
  }
}

/// Throws Error "<call>: the engine is unusable: <why>; load a checkpoint
/// (load_checkpoint) or build a new engine" when s.unusable is set.
inline void check_usable(const EngineState& s, const char* call) {
  if (!s.unusable.empty()) {
    throw Error(fmt::format("{}: the engine is unusable: {}; load a checkpoint (load_checkpoint) or build a new "
                            "engine",
                            call, s.unusable));
  }
}

}  // namespace zeroshard
