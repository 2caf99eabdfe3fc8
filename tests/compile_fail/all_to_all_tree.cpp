// Must NOT compile: all_to_all has no tree algorithm.
#include <collx/all_to_all.hpp>

void f(collx::communicator& comm, std::span<const int> s, std::span<int> r) {
  collx::all_to_all<collx::algo::tree>(comm, s, r);
}
