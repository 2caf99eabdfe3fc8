// Catch2's main(), compiled once into collx_test_main and linked into every test executable.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
