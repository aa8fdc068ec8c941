#include "examples/report/process_memory.h"

#include <cstring>
#include <fstream>
#include <string>

#include "core/error.h"

namespace zeroshard::examples {

double process_status_bytes(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const std::size_t n = std::strlen(field);
  while (std::getline(f, line)) {
    if (line.compare(0, n, field) == 0 && line.size() > n && line[n] == ':') {
      return std::stod(line.substr(n + 1)) * 1024.0;
    }
  }
  return 0;
}

void reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  if (!f) throw InvariantError("cannot write /proc/self/clear_refs to reset the peak RSS");
}

}  // namespace zeroshard::examples
