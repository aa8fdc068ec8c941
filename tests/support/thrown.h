// What a call throws, for tests that check error messages: the message of
// an exception of one type, with or without a test failure when nothing is
// thrown (exceptions of other types propagate), and whether a message
// holds a part. Header-only.
#pragma once

#include <doctest/doctest.h>

#include <string>

namespace zeroshard::testing {

/// The what() of the E that f() throws; "" when f returns normally.
template <class E, class F>
std::string error_message(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

/// The what() of the E that f() throws; when f returns normally, a test
/// failure reporting `expected` that ends the test case (doctest FAIL).
template <class E, class F>
std::string required_error_message(F&& f, const char* expected) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  FAIL(expected);
  return {};
}

/// True if `part` occurs in `text` (for checks on the messages above).
inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace zeroshard::testing
