// Runs Catch2 from a main() that does not compile Catch2's implementation (tests/catch_impl.cpp
// does, once; Catch2 v2 declares Catch::Session only there).
#pragma once

namespace collx_test {
/// Runs the tests that the command line selects (all by default), or, with `only_spec` non-null,
/// those of that Catch2 test spec (the command line's own spec is then ignored). Returns Catch2's
/// exit code: the number of failed assertions (at most 255), or non-zero for a bad command line.
int run_catch(int argc, char** argv, const char* only_spec = nullptr);
}  // namespace collx_test
