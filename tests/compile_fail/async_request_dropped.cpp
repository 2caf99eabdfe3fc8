// Must warn: a dropped request loses the call's outcome (collx::request is [[nodiscard]]).
#include <collx/allreduce.hpp>

void f(collx::communicator& comm, std::span<float> buf) { collx::allreduce_async(comm, buf); }
