// libFuzzer target: the checkpoint manifest reader
// (runtime/checkpoint/checkpoint_manifest.h). Every input is written as
// <scratch dir>/manifest.json and read with Manifest::read; when it parses,
// the rank-file layout is computed from it. An IoError is the expected way
// to reject an input; any other exception escaping, a sanitizer report or a
// crash is a finding.
#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "core/error.h"
#include "fuzz/fuzz_input.h"
#include "runtime/checkpoint/checkpoint_manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string dir = [] {
    const std::string d = zeroshard::fuzz::scratch_path("manifest");
    std::filesystem::create_directories(d);
    return d;
  }();
  zeroshard::fuzz::write_file(dir + "/manifest.json", data, size);
  try {
    const zeroshard::Manifest m = zeroshard::Manifest::read(dir);
    (void)m.file_bytes();
  } catch (const zeroshard::IoError&) {
  }
  return 0;
}
