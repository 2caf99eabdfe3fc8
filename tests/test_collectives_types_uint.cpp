// Every unsigned integer element type x every built-in op through allreduce, reduce_scatter and
// reduce (tests/collectives_checks.hpp); part of test_collectives_types_int (see there).
#include "collectives_checks.hpp"

TEMPLATE_TEST_CASE("allreduce, reduce_scatter, reduce: every unsigned integer type x every built-in op at n = 3, 5",
                   "[collectives][types]", std::uint8_t, std::uint16_t, std::uint32_t, std::uint64_t) {
  type_every_op<TestType>();
}
