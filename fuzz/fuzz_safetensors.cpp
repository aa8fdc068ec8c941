// libFuzzer target: the safetensors reader. zeroshard writes safetensors
// (runtime/checkpoint/safetensors_writer.h) but its only reader is the tests'
// checker, tests/support/safetensors_reader.h, so that is
// what is fuzzed. It documents std::runtime_error for a file that breaks a
// rule; nlohmann-json's own exceptions (a header that is not the expected
// JSON) are std::exception too and are accepted as rejections. A sanitizer
// report, an allocation over libFuzzer's limit or a crash is a finding.
#include <cstddef>
#include <cstdint>
#include <exception>

#include "fuzz/fuzz_input.h"
#include "tests/support/safetensors_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = zeroshard::fuzz::scratch_path("safetensors");
  zeroshard::fuzz::write_file(path, data, size);
  try {
    (void)zeroshard::testing::read_safetensors(path);
  } catch (const std::exception&) {
  }
  return 0;
}
