// libFuzzer target: the ds_config reader (runtime/config/config.h). Every input is
// a file handed to EngineConfig::from_file and, when it parses, checked
// against world sizes 1-4. A ConfigError is the expected way to reject an
// input; any other exception escaping, a sanitizer report or a crash is a
// finding.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "fuzz/fuzz_input.h"
#include "runtime/config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = zeroshard::fuzz::scratch_path("config");
  zeroshard::fuzz::write_file(path, data, size);
  try {
    const zeroshard::EngineConfig c = zeroshard::EngineConfig::from_file(path);
    for (int world = 1; world <= 4; ++world) {
      try {
        c.validate_for_world(world);
      } catch (const zeroshard::ConfigError&) {
      }
    }
  } catch (const zeroshard::ConfigError&) {
  }
  return 0;
}
