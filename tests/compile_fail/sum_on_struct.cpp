// Must NOT compile: ops::sum has no meaning for a struct (reduction_op is not satisfied).
#include <collx/allreduce.hpp>

struct point {
  int x, y;
};

void f(collx::communicator& comm, std::span<point> buf) { collx::allreduce(comm, buf, collx::ops::sum{}); }
