// Every signed integer element type x every built-in op through allreduce, reduce_scatter and
// reduce (tests/collectives_checks.hpp); the unsigned ones are in test_collectives_types_uint.cpp,
// linked into the same test: each file alone was the build's longest compile (100 s of g++).
#include "collectives_checks.hpp"

TEMPLATE_TEST_CASE("allreduce, reduce_scatter, reduce: every signed integer type x every built-in op at n = 3, 5",
                   "[collectives][types]", std::int8_t, std::int16_t, std::int32_t, std::int64_t) {
  type_every_op<TestType>();
}
