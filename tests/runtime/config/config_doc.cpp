// config_doc: prints docs/config.md from the ds_config key table
// (runtime/config/config_keys.h), or, with --check FILE, exits 1 when FILE
// differs from it (the config_doc test), naming the first differing line.
//
//   build/tests/runtime/config_doc > docs/config.md
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "runtime/config/config_keys.h"

int main(int argc, char** argv) {
  const std::string doc = zeroshard::config_reference_markdown();
  if (argc == 1) {
    std::fwrite(doc.data(), 1, doc.size(), stdout);
    return 0;
  }
  if (argc != 3 || std::string(argv[1]) != "--check") {
    std::fprintf(stderr, "usage: config_doc [--check FILE]\n");
    return 2;
  }
  std::ifstream in(argv[2], std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "config_doc: cannot open %s\n", argv[2]);
    return 1;
  }
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string file = ss.str();
  if (file == doc) return 0;
  std::istringstream a(file), b(doc);
  std::string la, lb;
  int line = 1;
  while (true) {
    const bool ga = static_cast<bool>(std::getline(a, la)), gb = static_cast<bool>(std::getline(b, lb));
    if (!ga && !gb) break;
    if (!ga || !gb || la != lb) break;
    ++line;
  }
  std::fprintf(stderr,
               "config_doc: %s differs from the key table at line %d:\n  file:  %s\n  table: %s\n"
               "regenerate it: config_doc > docs/config.md (from the build's tests/runtime folder)\n",
               argv[2], line, la.c_str(), lb.c_str());
  return 1;
}
