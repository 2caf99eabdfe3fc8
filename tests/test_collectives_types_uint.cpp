// Every unsigned integer element type x every built-in op through allreduce, reduce_scatter and
// reduce (tests/collectives_checks.hpp); part of test_collectives_types_int (see there). Sanitizer
// builds (COLLX_TEST_FEW_TYPES) test one unsigned type in test_collectives_types_int.cpp and compile
// nothing here: a second file would parse and instantiate the shared checks once more.
#ifndef COLLX_TEST_FEW_TYPES
#include "collectives_checks.hpp"

TEMPLATE_TEST_CASE("allreduce, reduce_scatter, reduce: every unsigned integer type x every built-in op at n = 3, 5",
                   "[collectives][types]", std::uint8_t, std::uint16_t, std::uint32_t, std::uint64_t) {
  type_every_op<TestType>();
}
#endif
