// Tests of the fashion_mnist example's IDX reader on tiny gzip files written
// here with zlib: round trip, split loading, and an IoError naming the file
// for every kind of bad input.
#include <doctest/doctest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "examples/fashion_mnist/idx_dataset.h"
#include "tests/support/thrown.h"

namespace fs = std::filesystem;
using namespace zeroshard;
using namespace zeroshard::examples;

namespace {

/// A fresh folder under the temp dir, removed at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("zs_fashion_mnist_test_" + std::to_string(::getpid()) +
                                        "_" + std::to_string(counter()++));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  static int& counter() {
    static int c = 0;
    return c;
  }
};

void put_be32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  out.push_back(std::uint8_t(v >> 24));
  out.push_back(std::uint8_t(v >> 16));
  out.push_back(std::uint8_t(v >> 8));
  out.push_back(std::uint8_t(v));
}

/// IDX bytes: magic 0x0000 08 <ndims>, dims, then data.
std::vector<std::uint8_t> idx_bytes(std::uint32_t magic, const std::vector<std::uint32_t>& dims,
                                    const std::vector<std::uint8_t>& data) {
  std::vector<std::uint8_t> out;
  put_be32(out, magic);
  for (auto d : dims) put_be32(out, d);
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

void write_gz(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  if (!bytes.empty())
    REQUIRE(gzwrite(f, bytes.data(), unsigned(bytes.size())) == int(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

/// The message of the IoError that f throws ("" if it throws none).
std::string io_error_of(auto&& f) { return testing::error_message<IoError>(f); }

std::vector<std::uint8_t> pixel_ramp(std::size_t n) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::uint8_t((i * 37) % 256);
  v[0] = 255;
  return v;
}

}  // namespace

TEST_CASE("idx reader: round trip of images and labels") {
  TempDir dir;
  const auto pixels = pixel_ramp(3 * 2 * 4);
  write_gz(dir.file("images.gz"), idx_bytes(0x00000803, {3, 2, 4}, pixels));
  write_gz(dir.file("labels.gz"), idx_bytes(0x00000801, {3}, {7, 0, 9}));

  const IdxImages images = read_idx_images(dir.file("images.gz"));
  CHECK(images.count == 3);
  CHECK(images.rows == 2);
  CHECK(images.cols == 4);
  REQUIRE(images.pixels.size() == pixels.size());
  for (std::size_t i = 0; i < pixels.size(); ++i) {
    CHECK(images.pixels[i] == doctest::Approx(pixels[i] / 255.0));
  }
  CHECK(images.pixels[0] == 1.0f);
  CHECK(*std::min_element(images.pixels.begin(), images.pixels.end()) >= 0.0f);

  const auto labels = read_idx_labels(dir.file("labels.gz"));
  CHECK(labels == std::vector<std::uint8_t>{7, 0, 9});
}

TEST_CASE("idx reader: fashion-mnist split names, count and label checks") {
  TempDir dir;
  write_gz(dir.file("train-images-idx3-ubyte.gz"), idx_bytes(0x00000803, {2, 1, 3}, pixel_ramp(6)));
  write_gz(dir.file("train-labels-idx1-ubyte.gz"), idx_bytes(0x00000801, {2}, {1, 2}));
  const LabeledImages split = load_fashion_mnist_split(dir.path.string(), "train", 10);
  CHECK(split.size() == 2);
  CHECK(split.images.pixels_per_image() == 3);

  write_gz(dir.file("t10k-images-idx3-ubyte.gz"), idx_bytes(0x00000803, {2, 1, 3}, pixel_ramp(6)));
  write_gz(dir.file("t10k-labels-idx1-ubyte.gz"), idx_bytes(0x00000801, {3}, {1, 2, 3}));
  std::string msg = io_error_of([&] { load_fashion_mnist_split(dir.path.string(), "t10k", 10); });
  CHECK(msg.find("t10k-labels-idx1-ubyte.gz") != std::string::npos);

  write_gz(dir.file("t10k-labels-idx1-ubyte.gz"), idx_bytes(0x00000801, {2}, {1, 10}));
  msg = io_error_of([&] { load_fashion_mnist_split(dir.path.string(), "t10k", 10); });
  CHECK(msg.find("t10k-labels-idx1-ubyte.gz") != std::string::npos);
  CHECK(msg.find("label 10") != std::string::npos);
}

TEST_CASE("idx reader: bad magic, truncation, trailing bytes and missing files name the file") {
  TempDir dir;
  SUBCASE("bad magic: labels read as images") {
    const std::string path = dir.file("labels-as-images.gz");
    write_gz(path, idx_bytes(0x00000801, {3}, {1, 2, 3}));
    const std::string msg = io_error_of([&] { read_idx_images(path); });
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find("magic") != std::string::npos);
  }
  SUBCASE("bad magic: wrong element type") {
    const std::string path = dir.file("floats.gz");
    write_gz(path, idx_bytes(0x00000D01, {1}, {0, 0, 0, 0}));
    const std::string msg = io_error_of([&] { read_idx_labels(path); });
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find("magic") != std::string::npos);
  }
  SUBCASE("header promises more images than the file holds") {
    const std::string path = dir.file("short.gz");
    write_gz(path, idx_bytes(0x00000803, {3, 2, 2}, pixel_ramp(8)));
    const std::string msg = io_error_of([&] { read_idx_images(path); });
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find("truncated") != std::string::npos);
  }
  SUBCASE("header claims ~2e9 items that a short file lacks: truncated, not a 2 GB allocation") {
    // fuzz/corpus/idx/oom_labels_header_claims_2e9 (found by fuzz_idx): the
    // reader allocated the whole claimed size before reading.
    for (const bool images : {false, true}) {
      const std::string path = dir.file(images ? "huge-images.gz" : "huge-labels.gz");
      write_gz(path, images ? idx_bytes(0x00000803, {2000, 1000, 1000}, pixel_ramp(7))
                            : idx_bytes(0x00000801, {0x7e000000}, {1, 2, 3, 4, 5, 6, 7}));
      const std::string msg = io_error_of([&] {
        if (images) {
          read_idx_images(path);
        } else {
          read_idx_labels(path);
        }
      });
      CHECK(msg.find(path) != std::string::npos);
      CHECK(msg.find("truncated") != std::string::npos);
    }
  }
  SUBCASE("file ends inside the header") {
    const std::string path = dir.file("header.gz");
    write_gz(path, {0, 0, 8, 3, 0, 0});
    const std::string msg = io_error_of([&] { read_idx_images(path); });
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find("truncated") != std::string::npos);
  }
  SUBCASE("compressed stream cut short") {
    const std::string full = dir.file("full.gz");
    write_gz(full, idx_bytes(0x00000803, {40, 28, 28}, pixel_ramp(40 * 28 * 28)));
    std::ifstream in(full, std::ios::binary);
    std::vector<char> gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    REQUIRE(gz.size() > 64);
    const std::string path = dir.file("cut.gz");
    std::ofstream(path, std::ios::binary).write(gz.data(), std::streamsize(gz.size() / 2));
    const std::string msg = io_error_of([&] { read_idx_images(path); });
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find("truncated") != std::string::npos);
  }
  SUBCASE("bytes after the last label") {
    const std::string path = dir.file("long.gz");
    write_gz(path, idx_bytes(0x00000801, {2}, {1, 2, 3}));
    const std::string msg = io_error_of([&] { read_idx_labels(path); });
    CHECK(msg.find(path) != std::string::npos);
  }
  SUBCASE("zero dimension") {
    const std::string path = dir.file("empty.gz");
    write_gz(path, idx_bytes(0x00000803, {0, 28, 28}, {}));
    const std::string msg = io_error_of([&] { read_idx_images(path); });
    CHECK(msg.find(path) != std::string::npos);
  }
  SUBCASE("missing file") {
    const std::string path = dir.file("absent.gz");
    const std::string msg = io_error_of([&] { read_idx_images(path); });
    CHECK(msg.find(path) != std::string::npos);
  }
}
