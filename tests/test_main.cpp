// Shared doctest main for every test program. Multi-rank suites are the same
// binaries started under mpirun (see tests/meson.build); each rank runs all
// cases, and the collectives inside them pair up across ranks.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

int main(int argc, char** argv) {
  doctest::Context context;
  context.applyCommandLine(argc, argv);
  return context.run();
}
