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
  explicit AgreedError(int rank) : rank_(rank) {}
  virtual ~AgreedError() = default;
  /// The rank that threw this copy (so that one rank, rank 0, reports it).
  int rank() const { return rank_; }

 private:
  int rank_;
};

/// An IoError every rank threw (a storage failure on some rank).
class AgreedIoError : public IoError, public AgreedError {
 public:
  AgreedIoError(const std::string& what, int rank) : IoError(what), AgreedError(rank) {}
};

/// A ConfigError every rank threw (bad input seen by some rank, or ranks
/// built with different models or configurations).
class AgreedConfigError : public ConfigError, public AgreedError {
 public:
  AgreedConfigError(const std::string& what, int rank) : ConfigError(what), AgreedError(rank) {}
};

/// A CommError every rank threw.
class AgreedCommError : public CommError, public AgreedError {
 public:
  AgreedCommError(const std::string& what, int rank) : CommError(what), AgreedError(rank) {}
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
/// failing rank's message (prefixed "rank R: " when the world has more than
/// one rank) as AgreedIoError, AgreedConfigError or AgreedCommError after
/// that rank's `kind`. Throws CommError if the collectives themselves fail.
void agree_on_error(Communicator& comm, const std::string& local_error, ErrorKind kind = ErrorKind::io);

/// Runs f(), turning any exception into a message and a kind, then
/// agree_on_error. f must not call collectives: a rank that fails inside f
/// would skip the ones after the failure.
template <class F>
void run_agreed(Communicator& comm, F&& f) {
  std::string err;
  ErrorKind kind = ErrorKind::io;
  try {
    f();
  } catch (const std::exception& e) {
    err = e.what();
    if (err.empty()) err = "unknown error";
    kind = error_kind(e);
  }
  agree_on_error(comm, err, kind);
}

}  // namespace zeroshard
