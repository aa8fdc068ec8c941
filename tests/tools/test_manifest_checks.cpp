// Manifests are checked, not trusted (runtime/checkpoint/manifest_checks.h): a
// one-character edit fails the manifest's own CRC-32; with the checksum
// recomputed, overlapping or shifted offsets (also near 2^64), renamed
// tensors, impossible shapes, world_size 0, negative steps and duplicate
// names are refused by every reader (Manifest::read, zs_ckpt_export,
// zs_ckpt_inspect --verify, load_checkpoint on every rank) naming the file
// and the field (an integer field holding a float or an out-of-range value
// included, never converted); a deep client_state, or a number a double
// cannot hold, is refused at its byte offset; a version 1 manifest (no
// checksum) still reads.

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <vector>

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include "comm/collective_error.h"
#include "core/durable_file.h"
#include "core/error.h"
#include "runtime/checkpoint/checkpoint_manifest.h"
#include "runtime/engine/engine.h"
#include "tests/support/ckpt_model.h"
#include "tests/support/scratch_files.h"
#include "tests/support/shell_status.h"
#include "tests/support/test_world.h"
#include "tools/checkpoint/checkpoint_verify.h"
#include "tools/checkpoint/safetensors_export.h"

using namespace zeroshard;
using namespace zeroshard::testing;
namespace fs = std::filesystem;

namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void spit(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::trunc) << text; }

// A checkpoint saved by this process group; returns the checkpoint directory.
std::string saved_checkpoint(const std::string& name) {
  const std::string dir = fmt::format("manifest-checks-{}-np{}", name, world().world_size());
  remove_dir_on_rank0(world(), dir);
  Engine e(make_config(2), world());
  CkptModel m(e);
  m.train_step(e, 1);
  const std::string tag = e.save_checkpoint(dir, {{"epoch", 0}});
  return dir + "/" + tag;
}

// Rank 0: rewrites the manifest with `edit` applied and a valid checksum,
// checks that every reader refuses it naming `field`, restores it.
void check_refused(const std::string& ckpt, const std::string& field, const std::function<void(Manifest&)>& edit) {
  CAPTURE(field);
  const std::string path = ckpt + "/manifest.json", original = slurp(path);
  Manifest m = Manifest::read(ckpt);
  edit(m);
  spit(path, m.to_text());
  const std::string want = path + ": " + field;
  CHECK_THROWS_WITH_AS(Manifest::read(ckpt), doctest::Contains(want.c_str()), IoError);
  CHECK_THROWS_WITH_AS(tools::export_safetensors(ckpt, ckpt + "/../out.safetensors"),
                       doctest::Contains(want.c_str()), IoError);
  CHECK_FALSE(fs::exists(ckpt + "/../out.safetensors"));
  spit(path, original);
}

}  // namespace

TEST_CASE("edited manifests are refused by every reader, naming the file and the field") {
  const std::string ckpt = saved_checkpoint("fields");
  if (world().rank() == 0) {
    const std::string path = ckpt + "/manifest.json", original = slurp(path);
    // A one-character edit: the body no longer matches manifest_crc32.
    std::string edited = original;
    const std::size_t at = edited.find("\"offset\": 0");
    REQUIRE(at != std::string::npos);
    edited[at + 10] = '1';
    spit(path, edited);
    CHECK_THROWS_WITH_AS(Manifest::read(ckpt), doctest::Contains("manifest_crc32"), IoError);
    const char* inspect = std::getenv("ZS_CKPT_INSPECT");
    if (inspect != nullptr) {
      const std::string log = ckpt + "/../inspect.txt";
      CHECK(run_status(fmt::format("{} {} --verify >{} 2>&1", inspect, ckpt, log)) == 1);
      CHECK(slurp(log).find(path + ": manifest_crc32") != std::string::npos);
    }
    spit(path, original);
    CHECK_NOTHROW(Manifest::read(ckpt));
    // With the checksum recomputed, the layout checks catch it.
    check_refused(ckpt, "units[1].params[0].offset", [](Manifest& m) { m.units[1].params[0].offset = 1; });
    check_refused(ckpt, "units[1].params[1].offset", [](Manifest& m) { m.units[1].params[1].offset = 34; });
    check_refused(ckpt, "units[1].params[1].offset",
                  [](Manifest& m) { m.units[1].params[1].offset = UINT64_MAX; });
    check_refused(ckpt, "units[1].params[0].numel", [](Manifest& m) { m.units[1].params[0].shape = {7, 6}; });
    check_refused(ckpt, "units[1].params[0].shape[0]", [](Manifest& m) { m.units[1].params[0].shape = {-7, -5}; });
    check_refused(ckpt, "units[2].params[0].name", [](Manifest& m) { m.units[2].params[0].name = "b.weight"; });
    check_refused(ckpt, "tensors", [](Manifest& m) { m.tensors[0] = "weights"; });
    check_refused(ckpt, "tensors[1]", [](Manifest& m) { m.tensors[1] = "exp_avg_renamed"; });
    check_refused(ckpt, "world_size", [](Manifest& m) { m.world_size = 0; });
    check_refused(ckpt, "optimizer_steps", [](Manifest& m) { m.optimizer_steps = -1; });
    check_refused(ckpt, "units[0]", [](Manifest& m) { m.units[0].padded += 16; });
    check_refused(ckpt, "files[0].bytes", [](Manifest& m) { m.files[0].bytes += 4; });
    check_refused(ckpt, "loss_scaler.scale", [](Manifest& m) { m.scaler.scale = -1; });
    if (inspect != nullptr) {
      Manifest m = Manifest::read(ckpt);
      m.units[1].params[0].offset = 1;
      spit(path, m.to_text());
      const std::string log = ckpt + "/../inspect.txt";
      CHECK(run_status(fmt::format("{} {} --verify >{} 2>&1", inspect, ckpt, log)) == 1);
      CHECK(slurp(log).find(path + ": units[1].params[0].offset") != std::string::npos);
      spit(path, original);
    }
  }
  world().barrier();
}

TEST_CASE("load_checkpoint refuses a manifest with overlapping offsets on every rank, loading nothing") {
  const std::string ckpt = saved_checkpoint("load");
  if (world().rank() == 0) {
    Manifest m = Manifest::read(ckpt);
    m.units[1].params[1].offset -= 1;
    spit(ckpt + "/manifest.json", m.to_text());
  }
  world().barrier();
  Engine e(make_config(3), world());
  CkptModel model(e);
  const std::vector<float> before = model.state(e);
  std::string msg;
  bool agreed = false;
  try {
    e.load_checkpoint(fs::path(ckpt).parent_path().string());
  } catch (const IoError& err) {
    msg = err.what();
    agreed = is_agreed(err);
  }
  CHECK(agreed);
  CHECK(msg.find("units[1].params[1].offset") != std::string::npos);
  CHECK(model.state(e) == before);
  CHECK(e.optimizer_steps() == 0);
  world().barrier();
}

TEST_CASE("a deeply nested client_state is refused at its byte offset; a version 1 manifest still reads") {
  const std::string ckpt = saved_checkpoint("deep");
  if (world().rank() == 0) {
    const std::string path = ckpt + "/manifest.json", original = slurp(path);
    Manifest m = Manifest::read(ckpt);
    m.client_state = "@@deep@@";
    std::string text = m.to_text();
    const std::size_t at = text.find("\"@@deep@@\"");
    REQUIRE(at != std::string::npos);
    text.replace(at, 10, std::string(100000, '[') + std::string(100000, ']'));
    spit(path, text);
    // The manifest's object is level 1: the 64th '[' is level 65.
    CHECK_THROWS_WITH_AS(Manifest::read(ckpt),
                         doctest::Contains(fmt::format("{}: JSON nested deeper than 64 levels at byte {}", path,
                                                       at + 63).c_str()),
                         IoError);
    // Version 1: no manifest_crc32, otherwise the same.
    nlohmann::json j = nlohmann::json::parse(original);
    j.erase("manifest_crc32");
    j["format_version"] = 1;
    spit(path, j.dump(2));
    const Manifest v1 = Manifest::read(ckpt);
    CHECK(v1.format_version == 1);
    CHECK_NOTHROW(tools::export_safetensors(ckpt, ckpt + "/../v1.safetensors"));
    spit(path, original);
  }
  world().barrier();
}

// Was fuzz/findings/manifest/ (now fuzz/corpus/manifest/number_overflow_*):
// nlohmann-json reports a number a double cannot hold as out_of_range 406,
// not parse_error, and it escaped Manifest::read as a library exception.
TEST_CASE("a number beyond the range of a double is refused naming the file and the number's byte offset") {
  const std::string ckpt = saved_checkpoint("overflow");
  if (world().rank() == 0) {
    const std::string path = ckpt + "/manifest.json", original = slurp(path);
    const std::vector<std::string> numbers = {"2e11111000", "-1e400", "1" + std::string(400, '0') + ".5"};
    for (const std::string& number : numbers) {
      CAPTURE(number);
      std::string text = original;
      const std::string key = "\"hysteresis_left\": ";
      const std::size_t at = text.find(key);
      REQUIRE(at != std::string::npos);
      const std::size_t value = at + key.size(), end = text.find_first_of(",\n}", value);
      text.replace(value, end - value, number);
      spit(path, text);
      // Quoted as every message quotes a value (brief(), core/quoted.h): 64 bytes and the length.
      const std::string shown =
          number.size() <= 64 ? number : fmt::format("{}... ({} bytes)", number.substr(0, 64), number.size());
      const std::string want = fmt::format("{}: invalid JSON at byte {}: number {}", path, value, shown);
      CHECK_THROWS_WITH_AS(Manifest::read(ckpt), doctest::Contains(want.c_str()), IoError);
      CHECK_THROWS_WITH_AS(Manifest::read(ckpt), doctest::Contains("beyond the range of a double"), IoError);
      CHECK_THROWS_WITH_AS(tools::export_safetensors(ckpt, ckpt + "/../out.safetensors"),
                           doctest::Contains(want.c_str()), IoError);
    }
    spit(path, original);
  }
  world().barrier();
}

TEST_CASE("an integer field holding a float or a value its type cannot hold is refused, not converted") {
  const std::string ckpt = saved_checkpoint("integers");
  if (world().rank() == 0) {
    const std::string path = ckpt + "/manifest.json", original = slurp(path);
    // Version 1 (no checksum), so that each edit is all that differs.
    nlohmann::json v1 = nlohmann::json::parse(original);
    v1.erase("manifest_crc32");
    v1["format_version"] = 1;
    const std::uint64_t wraps_to_world = (std::uint64_t{1} << 32) + static_cast<std::uint64_t>(world().world_size());
    struct Edit {
      std::function<void(nlohmann::json&)> apply;
      std::string want;
    };
    const std::vector<Edit> edits = {
        // As an int this would be the saved world size: read without a word before.
        {[&](nlohmann::json& j) { j["world_size"] = wraps_to_world; },
         fmt::format("world_size: {} is out of range [-2147483648, 2147483647]", wraps_to_world)},
        {[](nlohmann::json& j) { j["loss_scaler"]["hysteresis_left"] = 1e300; },
         "hysteresis_left: 1e+300 is out of range [-2147483648, 2147483647]"},
        {[](nlohmann::json& j) { j["units"][0]["numel"] = -3; },
         "numel: -3 is out of range [0, 18446744073709551615]"},
        // Beyond 2^64 - 1 JSON readers hold a whole number as a double: out of range all the same.
        {[](nlohmann::json& j) { j["units"][0]["numel"] = 1e20; },
         "numel: 1e+20 is out of range [0, 18446744073709551615]"},
        {[](nlohmann::json& j) { j["units"][0]["params"][0]["shape"][0] = 2.5; }, "shape: 2.5 is not an integer in [-9223372036854775808, 9223372036854775807]"},
        {[](nlohmann::json& j) { j["units"][0]["padded"] = 7.0; },
         "padded: 7.0 is not an integer in [0, 18446744073709551615]"},
        {[](nlohmann::json& j) { j["files"][0]["crc32"] = std::uint64_t{1} << 32; },
         "crc32: 4294967296 is out of range [0, 4294967295]"},
    };
    for (const Edit& e : edits) {
      CAPTURE(e.want);
      nlohmann::json j = v1;
      e.apply(j);
      spit(path, j.dump(2));
      const std::string want = path + ": " + e.want;
      CHECK_THROWS_WITH_AS(Manifest::read(ckpt), doctest::Contains(want.c_str()), IoError);
    }
    spit(path, v1.dump(2));
    CHECK(Manifest::read(ckpt).world_size == world().world_size());
    spit(path, original);
  }
  world().barrier();
}
