// libFuzzer target: the IDX reader of the fashion_mnist example
// (examples/fashion_mnist/idx_dataset.h). Every input is written to a file
// and read both as an image file and as a label file (gzip or plain: zlib
// reads both). An IoError is the expected way to reject an input; any
// other exception escaping, an allocation over libFuzzer's limit, a
// sanitizer report or a crash is a finding.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "examples/fashion_mnist/idx_dataset.h"
#include "fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = zeroshard::fuzz::scratch_path("idx");
  zeroshard::fuzz::write_file(path, data, size);
  try {
    (void)zeroshard::examples::read_idx_images(path);
  } catch (const zeroshard::IoError&) {
  }
  try {
    (void)zeroshard::examples::read_idx_labels(path);
  } catch (const zeroshard::IoError&) {
  }
  return 0;
}
