// Must NOT compile: a `mutable` lambda's call operator is not const, and collx calls ops as const
// (one copy may serve several threads, and a GPU kernel's copy is per thread: the state would not
// add up). The compiler's note must carry collx's advice, from the line of the concept it names.
#include <collx/allreduce.hpp>

void f(collx::communicator& comm, std::span<double> buf) {
  collx::allreduce(comm, buf, [calls = 0](double a, double b) mutable {
    ++calls;
    return a + b;
  });
}
