// The GPT example's corpus (text_corpus.h).
#include "examples/gpt/text_corpus.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "core/error.h"

namespace zeroshard::examples {

namespace fs = std::filesystem;

TextCorpus load_text_corpus(const std::string& dir, double holdout) {
  if (!(holdout > 0.0 && holdout <= 0.5)) {
    throw ConfigError(fmt::format("text corpus: holdout fraction {} outside (0, 0.5]", holdout));
  }
  std::vector<fs::path> paths;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_symlink() || !it->is_regular_file() || it->path().extension() == ".dat") continue;
    paths.push_back(it->path());
  }
  if (ec) throw IoError(fmt::format("{}: cannot list the folder: {}", dir, ec.message()));
  if (paths.empty()) throw IoError(fmt::format("{}: no text files (fortune files; install the fortunes package)", dir));
  std::sort(paths.begin(), paths.end());
  TextCorpus c;
  std::array<std::uint64_t, 256> counts{};
  for (const fs::path& p : paths) {
    std::ifstream in(p, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in && !in.eof()) throw IoError(fmt::format("{}: cannot read", p.string()));
    for (unsigned char ch : text) ++counts[ch];
    const std::size_t cut = text.size() - static_cast<std::size_t>(static_cast<double>(text.size()) * holdout);
    c.train.append(text, 0, cut);
    c.valid.append(text, cut);
    ++c.files;
  }
  const double total = static_cast<double>(c.train.size() + c.valid.size());
  for (std::uint64_t k : counts) {
    if (k > 0) c.unigram_bits -= (static_cast<double>(k) / total) * std::log2(static_cast<double>(k) / total);
  }
  return c;
}

std::vector<std::int32_t> sample_windows(const std::string& text, int batch, int seq, std::mt19937_64& gen) {
  const std::size_t w = static_cast<std::size_t>(seq) + 1;
  ZS_CHECK(text.size() >= w, "text of {} bytes is shorter than a window of {}", text.size(), w);
  std::uniform_int_distribution<std::size_t> pos(0, text.size() - w);
  std::vector<std::int32_t> out;
  out.reserve(static_cast<std::size_t>(batch) * w);
  for (int b = 0; b < batch; ++b) {
    const std::size_t at = pos(gen);
    for (std::size_t i = 0; i < w; ++i) out.push_back(static_cast<unsigned char>(text[at + i]));
  }
  return out;
}

std::vector<std::int32_t> fixed_windows(const std::string& text, int first, int batch, int count, int seq) {
  const std::size_t w = static_cast<std::size_t>(seq) + 1;
  ZS_CHECK(text.size() >= w && count > 0, "text of {} bytes is shorter than a window of {}", text.size(), w);
  std::vector<std::int32_t> out;
  for (int b = first; b < first + batch; ++b) {
    const std::size_t at = static_cast<std::size_t>(b) * (text.size() - w) / static_cast<std::size_t>(count);
    for (std::size_t i = 0; i < w; ++i) out.push_back(static_cast<unsigned char>(text[at + i]));
  }
  return out;
}

}  // namespace zeroshard::examples
