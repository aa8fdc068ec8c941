// Helpers shared by the ds_config tests (test_config.cpp,
// test_ds_config.cpp): the ConfigError message a text or a file produces.
#pragma once

#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/config/config.h"

namespace zeroshard::test {

/// The message of the ConfigError that parsing `text` (a JSON document
/// named "ds.json") throws, or "" if it parses.
inline std::string error_of(const std::string& text) {
  try {
    EngineConfig::from_json(nlohmann::json::parse(text), "ds.json");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

/// The message of the ConfigError that EngineConfig::from_file throws for a
/// file `path` holding `text` ("" if none); the file is removed afterwards.
inline std::string file_error_of(const std::string& text,
                                 const std::string& path = "test_config_scratch.json") {
  {
    std::ofstream f(path, std::ios::binary);
    f << text;
  }
  std::string what;
  try {
    EngineConfig::from_file(path);
  } catch (const ConfigError& e) {
    what = e.what();
  }
  std::remove(path.c_str());
  return what;
}

/// `depth` arrays, each the only element of the one before: [[[...]]].
inline nlohmann::json nested_arrays(int depth) {
  nlohmann::json root = nlohmann::json::array();
  nlohmann::json* inner = &root;
  for (int i = 1; i < depth; ++i) {
    inner->push_back(nlohmann::json::array());
    inner = &inner->back();
  }
  return root;
}

}  // namespace zeroshard::test
