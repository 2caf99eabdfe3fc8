// Every signed integer element type x every built-in op through allreduce, reduce_scatter and
// reduce (tests/collectives_checks.hpp); the unsigned ones are in test_collectives_types_uint.cpp,
// linked into the same test: each file alone was the build's longest compile (100 s of g++).
#include "collectives_checks.hpp"

// Sanitizer builds (COLLX_TEST_FEW_TYPES, set by tests/CMakeLists.txt) take the narrowest signed
// and the widest unsigned type only: memory and threading errors do not depend on the element
// type, and the full list costs the ASan pass 3 minutes of compiling. The g++ pass runs them all.
#ifdef COLLX_TEST_FEW_TYPES  // and the widest unsigned one, which test_collectives_types_uint.cpp then skips
#define COLLX_SIGNED_TYPES std::int8_t, std::uint64_t
#else
#define COLLX_SIGNED_TYPES std::int8_t, std::int16_t, std::int32_t, std::int64_t
#endif

TEMPLATE_TEST_CASE("allreduce, reduce_scatter, reduce: every signed integer type x every built-in op at n = 3, 5",
                   "[collectives][types]", COLLX_SIGNED_TYPES) {
  type_every_op<TestType>();
}
