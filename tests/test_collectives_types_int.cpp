// Every integer element type x every built-in op through allreduce, reduce_scatter and reduce
// (tests/collectives_checks.hpp; split from test_collectives.cpp to compile in parallel).
#include "collectives_checks.hpp"

TEMPLATE_TEST_CASE("allreduce, reduce_scatter, reduce: every integer type x every built-in op at n = 3, 5",
                   "[collectives][types]", std::int8_t, std::uint8_t, std::int16_t, std::uint16_t, std::int32_t,
                   std::uint32_t, std::int64_t, std::uint64_t) {
  type_every_op<TestType>();
}
