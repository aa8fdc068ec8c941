// Agreement over the whole mesh for the engine's operations whose errors
// are agreed within one data-parallel group only (checkpoint save and
// load: each pipeline stage and tensor-parallel rank's group reads and
// writes its own folder, [Note: engine on a mesh] in runtime/engine/engine.h).
// Without it, a folder missing for one stage made that stage's ranks throw
// together while the other stages went on into the training step and
// waited there for them.
#pragma once

#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "comm/collective_error.h"
#include "runtime/engine/engine_state.h"

namespace zeroshard {

/// Runs f() (which may throw; collectives inside it must be over groups
/// whose members all run f) and, on a mesh (s.world_comm set), agrees on
/// its outcome over the whole world: every rank returns f()'s result, or
/// every rank throws the AgreedError (io, config or comm, after
/// error_kind) carrying the first failing rank's message. Without a mesh,
/// f() as is. Collective over the world on a mesh.
template <class F>
auto agreed_over_world(EngineState& s, F&& f) -> decltype(f()) {
  if (s.world_comm == nullptr) return f();
  std::optional<decltype(f())> result;
  std::string error;
  ErrorKind kind = ErrorKind::io;
  try {
    result.emplace(f());
  } catch (const std::exception& e) {
    error = e.what();
    kind = error_kind(e);
  }
  agree_on_error(*s.world_comm, error, kind);
  return std::move(*result);
}

}  // namespace zeroshard
