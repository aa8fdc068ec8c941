// The byte-level text corpus of the GPT example: every fortune file of a
// folder (regular files, not the .dat indexes or .u8 links), each split into
// a training part and a fixed validation tail, and the byte statistics the
// run compares its loss with.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace zeroshard::examples {

/// Training and validation bytes, with the corpus's unigram entropy.
struct TextCorpus {
  std::string train;   ///< the first (1 - holdout) of every file, in name order
  std::string valid;   ///< the last `holdout` fraction of every file, in name order
  std::size_t files = 0;
  /// Entropy of the byte frequencies of the whole corpus, bits per byte
  /// (-sum p log2 p): the loss of the best model that ignores context.
  double unigram_bits = 0;
};

/// Reads every regular file of `dir` not ending in ".dat", in name order.
/// Throws IoError naming the folder when it holds no such file, or a file
/// that cannot be read; ConfigError when holdout is outside (0, 0.5].
TextCorpus load_text_corpus(const std::string& dir, double holdout);

/// `batch` windows of seq + 1 bytes of `text` at positions drawn from `gen`
/// (row-major [batch, seq + 1] int32 ids). Throws InvariantError when the
/// text is shorter than seq + 1.
std::vector<std::int32_t> sample_windows(const std::string& text, int batch, int seq, std::mt19937_64& gen);

/// `batch` windows at fixed, evenly spaced positions (validation): window j
/// of `count` starts at j (size - seq - 1) / count.
std::vector<std::int32_t> fixed_windows(const std::string& text, int first, int batch, int count, int seq);

}  // namespace zeroshard::examples
