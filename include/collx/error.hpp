/// @file error.hpp
/// collx::error, the one exception type collx throws, and its error codes.
#pragma once

#if __cplusplus < 202002L
#error "collx needs C++20: compile with -std=c++20 (for nvcc too: CMake 3.25 does not pass it to CUDA sources by itself)"
#endif
// Errors are exceptions, and collx catches them too (to fail the communicator for every rank
// before one leaves a call, and to carry an op's exception to the peers).
#if !defined(__cpp_exceptions) && !defined(__EXCEPTIONS)
#error "collx needs C++ exceptions (it reports errors as collx::error): do not compile with -fno-exceptions"
#endif

#include <stdexcept>
#include <string>
#include <system_error>

namespace collx {
inline namespace v0 {

/// What went wrong. Usable as a std::error_code through collx::error_category().
enum class errc : int {
  invalid_argument = 1,  ///< bad input detected before any byte moved (bad root, overlapping buffers, ...)
  mismatch,              ///< ranks disagree on a call (count, type, op, root, collective, sequence)
  timeout,               ///< a wait passed its deadline (a peer is late, stuck or dead)
  aborted,               ///< the communicator was aborted (by abort() or by another rank's failure)
  transport,             ///< the transport failed (a peer died, a message was malformed)
  cuda,                  ///< a CUDA call failed
  system,                ///< an operating-system call failed (shared memory, futex, fork)
  internal,              ///< a collx bug: please report it
};

/// The std::error_category of collx::errc.
inline const std::error_category& error_category() noexcept {
  struct category final : std::error_category {
    const char* name() const noexcept override { return "collx"; }
    std::string message(int c) const override {
      switch (static_cast<errc>(c)) {
        case errc::invalid_argument: return "invalid argument";
        case errc::mismatch: return "ranks disagree on the call";
        case errc::timeout: return "timed out";
        case errc::aborted: return "communicator aborted";
        case errc::transport: return "transport failure";
        case errc::cuda: return "CUDA error";
        case errc::system: return "system error";
        case errc::internal: return "internal error";
      }
      return "unknown collx error";
    }
  };
  static const category instance;
  return instance;
}

/// Makes a std::error_code from a collx::errc (found by argument-dependent lookup).
inline std::error_code make_error_code(errc e) noexcept { return {static_cast<int>(e), error_category()}; }

/// The exception collx throws for every failure. what() names the rank, the world size and the call,
/// e.g. "rank 3/8 allreduce#42<float,sum,ring>: count differs: rank 0 has 1024, rank 3 has 2048".
class error : public std::runtime_error {
 public:
  /// @param code what went wrong  @param message full text, already naming rank and call
  error(errc code, const std::string& message) : std::runtime_error(message), code_(code) {}
  /// The error code.
  errc code() const noexcept { return code_; }
  /// The error code as a std::error_code (category "collx").
  std::error_code error_code() const noexcept { return make_error_code(code_); }

 private:
  errc code_;
};

namespace detail {
/// Every collx throw goes through here.
[[noreturn]] inline void raise(errc code, const std::string& message) { throw error(code, message); }
}  // namespace detail

}  // namespace v0
}  // namespace collx

/// Makes collx::errc an error-code enum: it converts to std::error_code (make_error_code, in
/// collx::error_category()).
template <>
struct std::is_error_code_enum<collx::errc> : std::true_type {};

/// Throws collx::error(code, message); aborts with the message when exceptions are disabled.
#define COLLX_THROW(code, ...) ::collx::detail::raise((code), (__VA_ARGS__))
