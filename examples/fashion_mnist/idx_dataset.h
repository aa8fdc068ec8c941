// Reading MNIST-style IDX files (optionally gzip-compressed) into memory.
//
// The IDX format (LeCun et al., http://yann.lecun.com/exdb/mnist/): a 4-byte
// big-endian magic number 0x00 0x00 <type> <ndims>, then ndims big-endian
// uint32 dimensions, then the elements in row-major order. Fashion-MNIST
// (Xiao et al. 2017) uses type 0x08 (unsigned byte) with 3 dimensions for
// images [n, rows, cols] and 1 dimension for labels [n].
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zeroshard::examples {

/// Images of one IDX file: n x rows x cols pixels as floats in [0, 1]
/// (byte / 255), row-major, one image after the other.
struct IdxImages {
  std::size_t count = 0;      ///< number of images
  std::size_t rows = 0;       ///< pixels per column
  std::size_t cols = 0;       ///< pixels per row
  std::vector<float> pixels;  ///< count * rows * cols values in [0, 1]

  /// Pixels per image (rows * cols).
  std::size_t pixels_per_image() const { return rows * cols; }
};

/// Images and their labels, checked to have the same count.
struct LabeledImages {
  IdxImages images;
  std::vector<std::uint8_t> labels;  ///< images.count labels, each < num_classes

  std::size_t size() const { return labels.size(); }
};

/// Reads an IDX image file (magic 0x00000803, dims [n, rows, cols]),
/// gzip-compressed or plain (zlib reads both). Throws zeroshard::IoError
/// naming the file on a missing/unreadable file, a corrupt gzip stream, a
/// wrong magic number, a zero or implausibly large dimension, a truncated
/// file or bytes after the last image.
IdxImages read_idx_images(const std::string& path);

/// Reads an IDX label file (magic 0x00000801, dims [n]). Throws
/// zeroshard::IoError as read_idx_images.
std::vector<std::uint8_t> read_idx_labels(const std::string& path);

/// Reads `<dir>/<prefix>-images-idx3-ubyte.gz` and
/// `<dir>/<prefix>-labels-idx1-ubyte.gz` (prefix "train" or "t10k"). Throws
/// zeroshard::IoError naming the files if the counts differ or a label is
/// >= num_classes, and as read_idx_images.
LabeledImages load_fashion_mnist_split(const std::string& dir, const std::string& prefix,
                                       int num_classes = 10);

}  // namespace zeroshard::examples
