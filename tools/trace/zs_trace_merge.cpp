// zs_trace_merge: merges the per-rank Chrome traces of a run (written by
// zeroshard::write_chrome_trace, runtime/observe/chrome_trace.h) into one timeline
// that Perfetto (ui.perfetto.dev) or chrome://tracing opens, ranks as
// processes, their clocks aligned to rank 0's.
//
//   zs_trace_merge -o merged.json trace-rank0.json trace-rank1.json ...
//   zs_trace_merge -o merged.json run/traces/      # every trace-rank*.json in it
//
// Exit status: 0 on success; 1 if a file cannot be read or is not a
// per-rank trace (the message names the file), or the output cannot be
// written; CLI11's codes for bad arguments.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "examples/report/error_message.h"
#include "runtime/observe/chrome_trace.h"

int main(int argc, char** argv) {
  std::string output;
  std::vector<std::string> inputs;
  CLI::App app{"Merge zeroshard's per-rank Chrome traces into one timeline"};
  app.add_option("-o,--output", output, "merged trace to write (replaced atomically)")->required();
  app.add_option("INPUTS", inputs, "per-rank trace files, or one directory holding trace-rank<r>.json files")
      ->required();
  CLI11_PARSE(app, argc, argv);

  try {
    std::vector<std::string> paths;
    for (const std::string& in : inputs) {
      if (std::filesystem::is_directory(in)) {
        for (std::string& p : zeroshard::find_rank_traces(in)) paths.push_back(std::move(p));
      } else {
        paths.push_back(in);
      }
    }
    const nlohmann::json merged = zeroshard::merge_chrome_traces(paths);
    zeroshard::write_chrome_trace(output, merged);
    fmt::print("{}: {} ranks, {} events, clocks aligned to rank 0 within {} ns\n", output,
               merged["otherData"]["ranks"].size(), merged["traceEvents"].size(),
               merged["otherData"]["max_bound_ns"].get<std::int64_t>());
    return 0;
  } catch (const std::exception& e) {
    return zeroshard::examples::print_error("zs_trace_merge", e);
  }
}
