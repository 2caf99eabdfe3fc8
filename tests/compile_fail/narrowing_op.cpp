// Must NOT compile: an op whose parameters take int on float elements would truncate every value
// (C++ converts float to int silently: 0.75 + 0.75 = 0); collx refuses it with its own message.
#include <collx/allreduce.hpp>

void f(collx::communicator& comm, std::span<float> buf) {
  collx::allreduce(comm, buf, [](int a, int b) { return a + b; });
}
