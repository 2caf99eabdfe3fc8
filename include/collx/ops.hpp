/// @file ops.hpp
/// Built-in reduction ops, op traits (commutativity, name), and the wrapper that declares a user's
/// op commutative.
///
/// Semantics, the same on every rank, algorithm and transport:
/// - Integer sum/prod wrap modulo 2^bits (computed in unsigned arithmetic: no undefined behaviour).
/// - Unsigned types compare as unsigned in min/max.
/// - Floating min/max: if either operand is NaN the result is the canonical quiet NaN
///   (std::numeric_limits<T>::quiet_NaN()); -0.0 orders below +0.0. So the result does not depend on
///   the order in which operands meet.
/// - Narrow floats (collx::half, collx::bfloat16, CUDA's __half/__nv_bfloat16 via cuda_types.hpp) are
///   widened to fp32 when first read; every partial result, including those sent between ranks, is fp32;
///   the result is rounded to the element type once, to nearest even, when it is written to the
///   user's output.
/// - avg = sum, then divided by the world size n when written: floats divide in the accumulator
///   type; integers divide the wrapped sum by n with C++ truncation toward zero
///   (sum 7, n 2 -> 3; sum -3, n 2 -> -1).
/// - Bitwise ops (band, bor, bxor) exist for integer types only.
/// - std::complex<float>, <double> and <long double> take sum, prod and avg (as MPI_SUM and
///   MPI_PROD take the complex types). prod is std::complex's multiplication; avg divides both
///   parts by n. In kernels they rely on std::complex's operators being constexpr, so callable on
///   the device under nvcc's --expt-relaxed-constexpr (which collx::cuda sets).
/// The ops are COLLX_HOST_DEVICE: collx's CUDA kernels (collx/cuda/) call the same code and get the
/// same bits. A user op for device buffers needs a `__host__ __device__` call operator.
#pragma once

#include <cmath>
#include <complex>
#include <concepts>
#include <limits>
#include <type_traits>

#include <collx/detail/host_device.hpp>
#include <collx/numeric.hpp>

namespace collx {
inline namespace v0 {

namespace detail {
/// Unsigned type at least as wide as unsigned int, so that narrow types do not promote to int.
template <class T>
using wrap_unsigned_t =
    std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;

template <std::integral T>
COLLX_HOST_DEVICE constexpr T wrapping_add(T a, T b) noexcept {
  using U = std::make_unsigned_t<T>;
  using W = wrap_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<W>(static_cast<U>(a)) + static_cast<W>(static_cast<U>(b))));
}

template <std::integral T>
COLLX_HOST_DEVICE constexpr T wrapping_mul(T a, T b) noexcept {
  using U = std::make_unsigned_t<T>;
  using W = wrap_unsigned_t<T>;
  return static_cast<T>(static_cast<U>(static_cast<W>(static_cast<U>(a)) * static_cast<W>(static_cast<U>(b))));
}

/// Arithmetic types the built-in arithmetic ops accept directly (bool is not one).
template <class T>
concept builtin_arithmetic = (std::integral<T> && !std::same_as<T, bool>) || std::floating_point<T>;

template <class T>
concept builtin_integer = std::integral<T> && !std::same_as<T, bool>;

template <class T>
inline constexpr bool is_std_complex_v = false;
template <std::floating_point F>
inline constexpr bool is_std_complex_v<std::complex<F>> = true;
/// std::complex of a standard floating type: sum, prod and avg take it.
template <class T>
concept std_complex = is_std_complex_v<T>;

template <std::floating_point T>
COLLX_HOST_DEVICE constexpr T ordered_min(T a, T b) noexcept {
  if (a != a || b != b) return std::numeric_limits<T>::quiet_NaN();
  if (a == b) return std::signbit(a) ? a : b;  // -0 < +0
  return a < b ? a : b;
}

template <std::floating_point T>
COLLX_HOST_DEVICE constexpr T ordered_max(T a, T b) noexcept {
  if (a != a || b != b) return std::numeric_limits<T>::quiet_NaN();
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}

/// Applies a float function to narrow-float operands: widen, apply, round once.
template <class T, class F>
COLLX_HOST_DEVICE constexpr T via_float(T a, T b, F f) noexcept {
  return narrow_float<T>::narrow(f(narrow_float<T>::widen(a), narrow_float<T>::widen(b)));
}
}  // namespace detail

/// Built-in reduction ops. Each is an empty, trivially copyable function object with a templated
/// call operator, `static constexpr bool commutative = true` and a `name`.
namespace ops {

/// Addition (integers wrap; narrow floats widen to fp32; std::complex too).
struct sum {
  static constexpr bool commutative = true;  ///< op(a, b) == op(b, a)
  static constexpr const char* name = "sum";  ///< the op's name in messages and benchmark output
  /// a + b; integers wrap modulo 2^bits (computed unsigned), floats add in T.
  template <detail::builtin_arithmetic T>
  COLLX_HOST_DEVICE constexpr T operator()(T a, T b) const noexcept {
    if constexpr (std::integral<T>) return detail::wrapping_add(a, b);
    else return a + b;
  }
  /// Narrow floats: widens both to fp32, applies the op there and rounds the result to T once (to
  /// nearest, ties to even). Collectives do not call it per step: they keep partial results in fp32
  /// and round once, when writing the output (see the file docs).
  template <class T> requires is_narrow_float_v<T>
  COLLX_HOST_DEVICE constexpr T operator()(T a, T b) const noexcept { return detail::via_float(a, b, *this); }
  /// Complex addition (constexpr, not COLLX_HOST_DEVICE: std::complex's operators are constexpr only).
  template <detail::std_complex T>
  constexpr T operator()(const T& a, const T& b) const noexcept { return a + b; }
};

/// Multiplication (integers wrap; narrow floats widen to fp32; std::complex too).
struct prod {
  static constexpr bool commutative = true;  ///< op(a, b) == op(b, a)
  static constexpr const char* name = "prod";  ///< the op's name in messages and benchmark output
  /// a * b; integers wrap modulo 2^bits (computed unsigned), floats multiply in T.
  template <detail::builtin_arithmetic T>
  COLLX_HOST_DEVICE constexpr T operator()(T a, T b) const noexcept {
    if constexpr (std::integral<T>) return detail::wrapping_mul(a, b);
    else return a * b;
  }
  /// Narrow floats: widens both to fp32, applies the op there and rounds the result to T once (to
  /// nearest, ties to even). Collectives do not call it per step: they keep partial results in fp32
  /// and round once, when writing the output (see the file docs).
  template <class T> requires is_narrow_float_v<T>
  COLLX_HOST_DEVICE constexpr T operator()(T a, T b) const noexcept { return detail::via_float(a, b, *this); }
  /// Complex multiplication: std::complex's (constexpr, as sum's).
  template <detail::std_complex T>
  constexpr T operator()(const T& a, const T& b) const noexcept { return a * b; }
};

/// Minimum (NaN wins as the canonical quiet NaN; -0 < +0).
struct min {
  static constexpr bool commutative = true;  ///< op(a, b) == op(b, a)
  static constexpr const char* name = "min";  ///< the op's name in messages and benchmark output
  /// The smaller of a and b; floats: the canonical quiet NaN if either is NaN, -0 below +0.
  template <detail::builtin_arithmetic T>
  COLLX_HOST_DEVICE constexpr T operator()(T a, T b) const noexcept {
    if constexpr (std::floating_point<T>) return detail::ordered_min(a, b);
    else return b < a ? b : a;
  }
  /// Narrow floats: widens both to fp32, applies the op there and rounds the result to T once (to
  /// nearest, ties to even). Collectives do not call it per step: they keep partial results in fp32
  /// and round once, when writing the output (see the file docs).
  template <class T> requires is_narrow_float_v<T>
  COLLX_HOST_DEVICE constexpr T operator()(T a, T b) const noexcept { return detail::via_float(a, b, *this); }
};

/// Maximum (NaN wins as the canonical quiet NaN; +0 > -0).
struct max {
  static constexpr bool commutative = true;  ///< op(a, b) == op(b, a)
  static constexpr const char* name = "max";  ///< the op's name in messages and benchmark output
  /// The larger of a and b; floats: the canonical quiet NaN if either is NaN, +0 above -0.
  template <detail::builtin_arithmetic T>
  COLLX_HOST_DEVICE constexpr T operator()(T a, T b) const noexcept {
    if constexpr (std::floating_point<T>) return detail::ordered_max(a, b);
    else return a < b ? b : a;
  }
  /// Narrow floats: widens both to fp32, applies the op there and rounds the result to T once (to
  /// nearest, ties to even). Collectives do not call it per step: they keep partial results in fp32
  /// and round once, when writing the output (see the file docs).
  template <class T> requires is_narrow_float_v<T>
  COLLX_HOST_DEVICE constexpr T operator()(T a, T b) const noexcept { return detail::via_float(a, b, *this); }
};

/// Average: combines as sum; the result is divided by the world size when written (see file docs).
struct avg : sum {
  static constexpr const char* name = "avg";  ///< the op's name in messages and benchmark output
};

/// Bitwise and (integers only).
struct band {
  static constexpr bool commutative = true;  ///< op(a, b) == op(b, a)
  static constexpr const char* name = "band";  ///< the op's name in messages and benchmark output
  /// a & b, bitwise and.
  template <detail::builtin_integer T>
  COLLX_HOST_DEVICE constexpr T operator()(T a, T b) const noexcept { return static_cast<T>(a & b); }
};

/// Bitwise or (integers only).
struct bor {
  static constexpr bool commutative = true;  ///< op(a, b) == op(b, a)
  static constexpr const char* name = "bor";  ///< the op's name in messages and benchmark output
  /// a | b, bitwise or.
  template <detail::builtin_integer T>
  COLLX_HOST_DEVICE constexpr T operator()(T a, T b) const noexcept { return static_cast<T>(a | b); }
};

/// Bitwise exclusive or (integers only).
struct bxor {
  static constexpr bool commutative = true;  ///< op(a, b) == op(b, a)
  static constexpr const char* name = "bxor";  ///< the op's name in messages and benchmark output
  /// a ^ b, bitwise exclusive or.
  template <detail::builtin_integer T>
  COLLX_HOST_DEVICE constexpr T operator()(T a, T b) const noexcept { return static_cast<T>(a ^ b); }
};

}  // namespace ops

/// Declares a user's op commutative: `collx::commutative_op{my_lambda}`. Without it (or a
/// `static constexpr bool commutative = true` member) collx treats a user op as non-commutative
/// and combines operands strictly in rank order.
template <class F>
struct commutative_op {
  static constexpr bool commutative = true;  ///< always: what the wrapper declares
  F f;  ///< the wrapped op
  /// f(a, b); takes part in overload resolution only where f(a, b) is valid.
  COLLX_NV_EXEC_CHECK_DISABLE
  template <class A, class B>
  COLLX_HOST_DEVICE constexpr auto operator()(A&& a, B&& b) const
      -> decltype(f(static_cast<A&&>(a), static_cast<B&&>(b))) {
    return f(static_cast<A&&>(a), static_cast<B&&>(b));
  }
  /// Callable wherever f is, non-const and on non-const operands too, so that reduction_op names
  /// the requirement a wrapped op misses (a `mutable` lambda, `T&` parameters): collx itself calls
  /// only the const form above, on const operands.
  COLLX_NV_EXEC_CHECK_DISABLE
  template <class A, class B>
  COLLX_HOST_DEVICE constexpr auto operator()(A&& a, B&& b) -> decltype(f(static_cast<A&&>(a), static_cast<B&&>(b))) {
    return f(static_cast<A&&>(a), static_cast<B&&>(b));
  }
};
/// `commutative_op{f}` deduces commutative_op<F> from f (a lambda's closure type, say).
template <class F>
commutative_op(F) -> commutative_op<F>;

/// Compile-time facts about an op. Specialise it to declare a third-party op commutative.
template <class Op>
struct op_traits {
  /// True when op(a, b) == op(b, a) may be assumed. Associativity is always assumed (as in MPI) and
  /// never checked.
  static constexpr bool commutative = [] {
    if constexpr (requires { Op::commutative; }) return static_cast<bool>(Op::commutative);
    else return false;
  }();
  /// The op's name in messages and benchmark output ("custom" for user ops).
  static constexpr const char* name = [] {
    if constexpr (requires { Op::name; }) return static_cast<const char*>(Op::name);
    else return "custom";
  }();
  /// True for ops::avg: the result is divided by the world size.
  static constexpr bool is_avg = std::is_same_v<Op, ops::avg>;
};

namespace detail {
/// Whether an arithmetic value of type From loses anything as a To (C++'s narrowing, `To{from}`),
/// except that an integer converts to a floating type whose significand holds all its values
/// (int32 to double, int16 to float), which list-initialisation calls narrowing too.
template <class From, class To>
inline constexpr bool arithmetic_narrows = [] {
  if constexpr (std::is_integral_v<From> && !std::is_same_v<From, bool> && std::is_floating_point_v<To>)
    return std::numeric_limits<To>::digits < std::numeric_limits<From>::digits;
  else return !requires(const From& f) { To{f}; };
}();

/// Whether passing a T to parameter type P loses values the op is likely not meant to lose:
/// arithmetic (or enum) parameters the elements narrow into (arithmetic_narrows). Class types
/// convert as the concept already checks.
template <class T, class... P>
inline constexpr bool parameters_narrow =
    ((std::is_arithmetic_v<T> && (std::is_arithmetic_v<std::remove_cvref_t<P>> || std::is_enum_v<std::remove_cvref_t<P>>) &&
      arithmetic_narrows<T, std::remove_cvref_t<P>>) || ...);

/// Whether an op's result of type R, where a T is expected, loses values the op is likely not meant
/// to lose: an integral result on floating elements, or a floating one with a shorter significand
/// (float on double elements). Integral results on integral elements are accepted: `a + b` on int8
/// elements is an int (C++'s promotion), and converting it back wraps as the built-ins do.
template <class T, class R>
inline constexpr bool result_narrows =
    std::is_floating_point_v<T> &&
    (std::is_integral_v<R> || (std::is_floating_point_v<R> && std::numeric_limits<R>::digits < std::numeric_limits<T>::digits));

/// The call signature of an op that has exactly one: a function pointer, or a class with one
/// non-template operator() (a lambda with typed parameters). None (`known` false) for generic
/// lambdas, overloaded or template call operators (the built-in ops).
template <class F>
struct call_parameters {
  static constexpr bool known = false;  ///< no single signature to look at
};
/// A function pointer's signature.
template <class R, class... P>
struct call_parameters<R (*)(P...)> {
  static constexpr bool known = true;  ///< returns R, takes P...
  /// parameters_narrow for elements of type T.
  template <class T>
  static constexpr bool narrows = parameters_narrow<T, P...>;
  /// Whether a parameter is of type T itself (by value or reference).
  template <class T>
  static constexpr bool takes = (std::is_same_v<std::remove_cvref_t<P>, T> || ...);
};
/// A noexcept function pointer's signature.
template <class R, class... P>
struct call_parameters<R (*)(P...) noexcept> : call_parameters<R (*)(P...)> {};
/// A const call operator's signature.
template <class R, class C, class... P>
struct call_parameters<R (C::*)(P...) const> : call_parameters<R (*)(P...)> {};
/// A non-const call operator's signature: a `mutable` lambda without captures, which collx calls
/// through its conversion to a function pointer (any other non-const one is refused by the concept).
template <class R, class C, class... P>
struct call_parameters<R (C::*)(P...)> : call_parameters<R (*)(P...)> {};
/// A non-const noexcept call operator's signature.
template <class R, class C, class... P>
struct call_parameters<R (C::*)(P...) noexcept> : call_parameters<R (*)(P...)> {};
/// A const noexcept call operator's signature.
template <class R, class C, class... P>
struct call_parameters<R (C::*)(P...) const noexcept> : call_parameters<R (*)(P...)> {};
/// A const& call operator's signature.
template <class R, class C, class... P>
struct call_parameters<R (C::*)(P...) const&> : call_parameters<R (*)(P...)> {};
/// A const& noexcept call operator's signature.
template <class R, class C, class... P>
struct call_parameters<R (C::*)(P...) const & noexcept> : call_parameters<R (*)(P...)> {};

/// The signature of op type Op's single call operator (see call_parameters).
template <class Op>
struct op_parameters : call_parameters<std::decay_t<Op>> {};
/// A class with one non-template operator().
template <class Op>
  requires requires { &Op::operator(); }
struct op_parameters<Op> : call_parameters<decltype(&Op::operator())> {};
/// commutative_op{f}: f's signature (the wrapper's operator() is a template).
template <class F>
struct op_parameters<commutative_op<F>> : op_parameters<F> {};

/// Whether op(float, float) returns what an fp32 partial result can be made of: a value that
/// converts to float, or a T itself (`(float a, float b) -> collx::half` rounds each step's result
/// to T, as it asks; collx::half converts to float explicitly only).
template <class Op, class T>
inline constexpr bool fp32_op_result = [] {
  if constexpr (!std::is_invocable_v<const Op&, const float&, const float&>) return false;
  else {
    using R = std::remove_cvref_t<std::invoke_result_t<const Op&, const float&, const float&>>;
    return std::is_convertible_v<R, float> || std::is_same_v<R, std::remove_cv_t<T>>;
  }
}();

/// Whether a user's op reduces narrow-float elements T (collx::half, collx::bfloat16, CUDA's __half
/// and __nv_bfloat16) in fp32, as the built-in ops do: it takes float operands and returns what
/// converts to float or a T (fp32_op_result), and its parameters are typed and not T (`float`,
/// `double`), or it is generic (`[](auto a, auto b) { return a + b; }`: collx::half has no
/// arithmetic, so such a body can only mean floats; on CUDA's __half, which has, the op runs in
/// fp32 too, as the built-ins do). A generic op or overload set is tried on floats first, and on T
/// only where it cannot take floats: one whose body needs T itself (`a.bits`) must type its
/// parameters T. collx then widens each element to fp32 when it reads it, passes the op fp32
/// operands, keeps every partial result (sent ones too) in fp32, and rounds once when it writes
/// the result. An op whose parameters are T gets T operands and rounds at each step, as it asks;
/// so does one that takes floats and returns T (its results are T, widened exactly).
template <class Op, class T>
inline constexpr bool op_runs_in_fp32 = [] {
  if constexpr (!is_narrow_float_v<T>) return false;
  else if constexpr (op_parameters<Op>::known)
    return !op_parameters<Op>::template takes<std::remove_cv_t<T>> && fp32_op_result<Op, T>;
  // Generic: not tried on T first (with a deduced result that probe would be a hard error wherever
  // the body needs arithmetic, which collx::half lacks).
  else return fp32_op_result<Op, T>;
}();

/// The operand type collx passes an op on elements of type T: float where op_runs_in_fp32, T
/// otherwise.
template <class Op, class T>
using op_operand_t = std::conditional_t<op_runs_in_fp32<Op, T>, float, T>;

/// An op that loses element values silently: parameters the operands narrow into
/// (parameters_narrow: an op taking `int` on float elements truncates every value, 0.75 + 0.75 = 0;
/// `float` on int32 elements rounds those above 2^24; `int` on unsigned ones changes their sign),
/// or a result that narrows them (result_narrows: `int` on float elements, `float` on double ones),
/// generic lambdas' results included. The collectives refuse it at compile time. Wider parameters
/// (double on float or int32 elements) are accepted. Operands are op_operand_t (fp32 where the op
/// runs in fp32 on narrow floats).
template <class Op, class T>
inline constexpr bool op_narrows_elements = [] {
  using operand = op_operand_t<Op, T>;
  bool narrows = false;
  if constexpr (op_parameters<Op>::known) narrows = op_parameters<Op>::template narrows<operand>;
  if constexpr (std::is_invocable_v<const Op&, const operand&, const operand&>)
    narrows = narrows || result_narrows<operand, std::remove_cvref_t<std::invoke_result_t<const Op&, const operand&, const operand&>>>;
  return narrows;
}();
}  // namespace detail

}  // namespace v0
}  // namespace collx
