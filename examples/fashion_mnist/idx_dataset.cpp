#include "examples/fashion_mnist/idx_dataset.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>

#include "core/error.h"

namespace zeroshard::examples {
namespace {

constexpr std::uint8_t kTypeUnsignedByte = 0x08;
// Upper bound on the number of elements of one file (4 GiB of bytes): a
// header claiming more is corrupt, not a data set this program can hold.
constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 32;

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

/// One open IDX file; every failure throws IoError naming it.
class IdxReader {
 public:
  explicit IdxReader(std::string path) : path_(std::move(path)) {
    errno = 0;
    file_.reset(gzopen(path_.c_str(), "rb"));
    if (!file_) {
      const int err = errno;
      throw IoError(fmt::format("{}: cannot open: {} (errno {}); check --data-dir", path_,
                                err != 0 ? std::strerror(err) : "out of memory", err));
    }
    gzbuffer(file_.get(), 1 << 20);
  }

  /// Reads the header; checks the magic number against `ndims` and returns
  /// the dimensions.
  std::vector<std::uint64_t> read_header(int ndims, const char* what) {
    std::array<std::uint8_t, 4> magic{};
    read_exact(magic.data(), magic.size(), "the magic number");
    const std::uint32_t got = be32(magic.data());
    const std::uint32_t want = (std::uint32_t{kTypeUnsignedByte} << 8) | std::uint32_t(ndims);
    if (got != want) {
      throw IoError(fmt::format(
          "{}: bad magic number 0x{:08x} at offset 0, expected 0x{:08x} (IDX {} file of unsigned "
          "bytes with {} dimension(s)); is this the right file?",
          path_, got, want, what, ndims));
    }
    std::vector<std::uint64_t> dims(static_cast<std::size_t>(ndims));
    std::uint64_t total = 1;
    for (int d = 0; d < ndims; ++d) {
      std::array<std::uint8_t, 4> b{};
      read_exact(b.data(), b.size(), "the header");
      dims[std::size_t(d)] = be32(b.data());
      if (dims[std::size_t(d)] == 0) {
        throw IoError(fmt::format("{}: dimension {} (at offset {}) is 0", path_, d, 4 + 4 * d));
      }
      total *= dims[std::size_t(d)];
      if (total > kMaxElements) {
        throw IoError(fmt::format("{}: header claims more than {} elements; the file is corrupt",
                                  path_, kMaxElements));
      }
    }
    return dims;
  }

  /// Reads exactly n bytes; `what` describes them for the error message.
  void read_exact(std::uint8_t* dst, std::size_t n, const char* what) {
    std::size_t done = 0;
    while (done < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - done, 1u << 30));
      const int got = gzread(file_.get(), dst + done, chunk);
      if (got < 0) throw_stream_error(what);
      if (got == 0) {
        int zerr = Z_OK;
        gzerror(file_.get(), &zerr);
        if (zerr != Z_OK && zerr != Z_BUF_ERROR) throw_stream_error(what);
        throw IoError(fmt::format(
            "{}: truncated: reading {} needed {} bytes from uncompressed offset {}, got {}; "
            "download the file again",
            path_, what, n, offset_, done));
      }
      done += static_cast<std::size_t>(got);
      offset_ += static_cast<std::uint64_t>(got);
    }
  }

  /// Reads `n` bytes into a vector that grows as the data arrives (16 MiB
  /// at a time), so a header that claims far more than a truncated file
  /// holds fails with "truncated" before gigabytes are allocated (found by
  /// fuzz/fuzz_idx.cpp).
  std::vector<std::uint8_t> read_items(std::uint64_t n, const char* what) {
    constexpr std::uint64_t kChunk = std::uint64_t{1} << 24;
    std::vector<std::uint8_t> out;
    while (out.size() < n) {
      const std::size_t have = out.size();
      const std::size_t len = static_cast<std::size_t>(std::min<std::uint64_t>(n - have, kChunk));
      out.resize(have + len);
      read_exact(out.data() + have, len, what);
    }
    return out;
  }

  /// Throws if any byte follows the expected data.
  void expect_end() {
    std::uint8_t extra = 0;
    const int got = gzread(file_.get(), &extra, 1);
    if (got < 0) throw_stream_error("the end of the file");
    if (got > 0) {
      throw IoError(fmt::format(
          "{}: unexpected bytes after the last item at uncompressed offset {}; the header's "
          "dimensions do not match the data",
          path_, offset_));
    }
  }

  const std::string& path() const { return path_; }

 private:
  static std::uint32_t be32(const std::uint8_t* b) {
    return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) |
           std::uint32_t{b[3]};
  }

  [[noreturn]] void throw_stream_error(const char* what) {
    int zerr = Z_OK;
    const char* msg = gzerror(file_.get(), &zerr);
    if (zerr == Z_BUF_ERROR) {
      throw IoError(fmt::format(
          "{}: truncated: the compressed stream ends while reading {} (uncompressed offset {}); "
          "download the file again",
          path_, what, offset_));
    }
    throw IoError(fmt::format("{}: reading {} failed near uncompressed offset {}: {} (zlib {})",
                              path_, what, offset_, msg != nullptr ? msg : "?", zerr));
  }

  std::string path_;
  GzHandle file_;
  std::uint64_t offset_ = 0;
};

}  // namespace

IdxImages read_idx_images(const std::string& path) {
  IdxReader reader(path);
  const auto dims = reader.read_header(3, "image");
  IdxImages out;
  out.count = dims[0];
  out.rows = dims[1];
  out.cols = dims[2];
  const std::size_t n = out.count * out.rows * out.cols;
  const std::vector<std::uint8_t> bytes = reader.read_items(n, "the pixels");
  reader.expect_end();
  out.pixels.resize(n);
  constexpr float kScale = 1.0f / 255.0f;
  std::transform(bytes.begin(), bytes.end(), out.pixels.begin(),
                 [](std::uint8_t b) { return static_cast<float>(b) * kScale; });
  return out;
}

std::vector<std::uint8_t> read_idx_labels(const std::string& path) {
  IdxReader reader(path);
  const auto dims = reader.read_header(1, "label");
  std::vector<std::uint8_t> labels = reader.read_items(dims[0], "the labels");
  reader.expect_end();
  return labels;
}

LabeledImages load_fashion_mnist_split(const std::string& dir, const std::string& prefix,
                                       int num_classes) {
  const std::string images_path = fmt::format("{}/{}-images-idx3-ubyte.gz", dir, prefix);
  const std::string labels_path = fmt::format("{}/{}-labels-idx1-ubyte.gz", dir, prefix);
  LabeledImages out;
  out.images = read_idx_images(images_path);
  out.labels = read_idx_labels(labels_path);
  if (out.labels.size() != out.images.count) {
    throw IoError(fmt::format("{} holds {} images but {} holds {} labels; use files of one split",
                              images_path, out.images.count, labels_path, out.labels.size()));
  }
  for (std::size_t i = 0; i < out.labels.size(); ++i) {
    if (static_cast<int>(out.labels[i]) >= num_classes) {
      throw IoError(fmt::format("{}: label {} of item {} (offset {}) is not below {} classes",
                                labels_path, out.labels[i], i, 8 + i, num_classes));
    }
  }
  return out;
}

}  // namespace zeroshard::examples
