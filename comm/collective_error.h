// [Note: agreeing on errors]
// A rank that fails alone must not leave the others waiting in the next
// collective. Every fallible phase of a collective operation (finalize,
// set_parameter with parameters on nvme, checkpoint save and load, the
// offloaded parts of step) runs its local work through run_agreed(): the
// outcome is all-reduced, and if any rank failed, every rank throws the
// same error, the message of the lowest failing rank (prefixed with that
// rank), as an AgreedError: AgreedIoError, AgreedConfigError or
// AgreedCommError after the kind of the original exception.
//
// The rule for code that embeds the engine (the examples follow it, see
// examples/end_job.h):
//  - an exception for which is_agreed() is true was thrown on every rank of
//    the engine's communicator with the same message: report it once (rank
//    0) and end every process normally (return from main);
//  - any other exception out of a collective call (an InvariantError, a
//    std::bad_alloc, an error of the loop's own code on one rank) may have
//    been thrown on this rank alone, while the others wait in their next
//    collective: report it on the rank that saw it and end the whole job
//    with Communicator::abort(). Returning from main instead hangs: the MPI
//    finalizer waits in MPI_Finalize for ranks that wait in a collective.
//  - an uncaught exception ends the process through std::terminate
//    (SIGABRT), which mpirun turns into the end of the job.
#pragma once

#include <string>

#include "comm/communicator.h"
#include "core/error.h"

namespace zeroshard {

/// Marker base of the errors that every rank of a communicator threw with
/// the same message (after run_agreed / agree_on_error, or a check of
/// agreed data such as the model fingerprint). Not an exception by
/// itself: the concrete types below are also the usual zeroshard::Error
/// subclasses, so existing catch clauses keep working.
/// Thread safety: plain value type.
class AgreedError {
 public:
  explicit AgreedError(int rank, bool names_rank = false) : rank_(rank), names_rank_(names_rank) {}
  virtual ~AgreedError() = default;
  /// The rank that threw this copy (so that one rank, rank 0, reports it).
  int rank() const { return rank_; }
  /// Whether the message starts with "rank R: " naming the failing rank
  /// (agreed over more than one rank).
  bool names_rank() const { return names_rank_; }

 private:
  int rank_;
  bool names_rank_;
};

/// An IoError every rank threw (a storage failure on some rank).
class AgreedIoError : public IoError, public AgreedError {
 public:
  AgreedIoError(const std::string& what, int rank, bool names_rank = false)
      : IoError(what), AgreedError(rank, names_rank) {}
};

/// A ConfigError every rank threw (bad input seen by some rank, or ranks
/// built with different models or configurations).
class AgreedConfigError : public ConfigError, public AgreedError {
 public:
  AgreedConfigError(const std::string& what, int rank, bool names_rank = false)
      : ConfigError(what), AgreedError(rank, names_rank) {}
};

/// A CommError every rank threw.
class AgreedCommError : public CommError, public AgreedError {
 public:
  AgreedCommError(const std::string& what, int rank, bool names_rank = false)
      : CommError(what), AgreedError(rank, names_rank) {}
};

/// True if `e` is an AgreedError: every rank threw it with this message.
bool is_agreed(const std::exception& e);

/// The kind of a local failure, which decides the type every rank throws.
enum class ErrorKind { io = 1, config = 2, comm = 3 };

/// The kind agree_on_error gives to exception `e`: config for ConfigError,
/// comm for CommError, io for everything else (IoError, std::bad_alloc,
/// filesystem errors, ...).
ErrorKind error_kind(const std::exception& e);

/// Collective over comm: given this rank's error message ("" = success),
/// returns if every rank succeeded, else throws on every rank the first
/// failing rank's message as AgreedIoError, AgreedConfigError or
/// AgreedCommError after that rank's `kind`. The message is prefixed
/// "rank R: " when comm has more than one rank, unless that rank's
/// `names_its_rank` is set (an error agreed before, on this or a
/// sub-communicator, already says it: no "rank 0: rank 0:"). Throws
/// CommError if the collectives themselves fail.
void agree_on_error(Communicator& comm, const std::string& local_error, ErrorKind kind = ErrorKind::io,
                    bool names_its_rank = false);

/// agree_on_error for this rank's failure `e`: its message ("unknown
/// error" if empty), error_kind(e), and whether it names its rank already
/// (an AgreedError whose names_rank() is set). Always throws (an
/// AgreedError); collective over comm like agree_on_error, whose every
/// other rank passes its own outcome.
[[noreturn]] void agree_on_failure(Communicator& comm, const std::exception& e);

/// Runs f(), then agree_on_error with its outcome (agree_on_failure when
/// it threw). f must not call collectives: a rank that fails inside f
/// would skip the ones after the failure.
template <class F>
void run_agreed(Communicator& comm, F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    agree_on_failure(comm, e);
  }
  agree_on_error(comm, "");
}

}  // namespace zeroshard
