// The one place where C API results of the offload layer (errno, io_uring
// `-errno` completions) become text and IoError exceptions.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace zeroshard {

/// "No space left on device (ENOSPC)" for an errno value (positive).
/// Thread safe.
std::string errno_text(int err);

/// A hint on what to do about `err` (free space for ENOSPC, check the
/// device for EIO, ...); empty when there is nothing useful to say.
std::string_view errno_hint(int err);

/// Message for a failed operation on a file: "<what> <path> failed at offset
/// <offset> (<length> bytes): <errno_text>. <hint>". Thread safe.
std::string io_failure_message(std::string_view what, const std::filesystem::path& path,
                               std::uint64_t offset, std::uint64_t length, int err);

/// Throws IoError "<what> <path> failed: <errno_text>. <hint>" (no offset:
/// for open, fsync, rename, statvfs ...).
[[noreturn]] void throw_file_error(std::string_view what, const std::filesystem::path& path, int err);

/// Writes one line "zeroshard: <message>" to stderr the first time a given
/// message is logged in this process; later identical messages are dropped.
/// Thread safe.
void log_once(const std::string& message);

}  // namespace zeroshard
