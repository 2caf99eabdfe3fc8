// main() of collx's CPU test executables (Catch2's implementation is in catch_impl.cpp).
#include "catch_runner.hpp"

int main(int argc, char** argv) { return collx_test::run_catch(argc, argv); }
