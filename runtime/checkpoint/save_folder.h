// A save directory's own entries beside its checkpoints: `latest`. Local
// file operations, no collectives: the engine agrees on the outcome.
#pragma once

#include <string>

namespace zeroshard {

/// The tag that <save_dir>/latest names: its text without trailing
/// newlines and spaces. Throws IoError naming the file when it cannot be
/// read, is empty, or holds a NUL byte or another control character (a
/// damaged file: the message gives the byte's offset and value, and is never
/// cut by the byte itself). A tag is a folder name in save_dir.
std::string read_latest_tag(const std::string& save_dir);

}  // namespace zeroshard
