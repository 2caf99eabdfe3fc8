// Catch2's implementation, compiled once (collx_catch) and shared by every test executable, CPU and
// GPU: each main (test_main.cpp, cuda/gpu_test_main.cpp) is then a few lines that call run_catch.
// CATCH_CONFIG_RUNNER: the implementation without Catch2's own main().
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "catch_runner.hpp"

int collx_test::run_catch(int argc, char** argv, const char* only_spec) {
  Catch::Session session;
  if (!only_spec) return session.run(argc, argv);
  const char* args[] = {argc > 0 ? argv[0] : "test", only_spec};
  if (const int rc = session.applyCommandLine(2, args); rc != 0) return rc;
  return session.run();
}
