// Must NOT compile: algo::ring reduces blocks in rotated rank order, so a non-commutative op is
// rejected with a static_assert that names the alternatives (checked by tests/CMakeLists.txt).
#include <collx/allreduce.hpp>

struct mat_mul {  // not declared commutative
  int operator()(int a, int b) const { return a * 31 + b; }
};

void f(collx::communicator& comm, std::span<int> buf) { collx::allreduce<collx::algo::ring>(comm, buf, mat_mul{}); }
