// The second translation unit of ctest compile_glibcxx_debug (see all_headers.cpp).
#define COLLX_ALL_HEADERS_MAIN
#include "all_headers.cpp"
