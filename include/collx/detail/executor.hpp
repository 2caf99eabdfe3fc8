/// @file detail/executor.hpp
/// Carries out one rank's schedule over a message transport: posts sends, receives into (or reduces
/// into) the right buffer with the conversions the buffers' types call for.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include <collx/algo/schedule.hpp>
#include <collx/detail/reduction.hpp>
#include <collx/detail/streaming_store.hpp>
#include <collx/error.hpp>
#include <collx/transport/transport.hpp>

namespace collx {
inline namespace v0 {
namespace detail {

/// Marks a collective that moves data without reducing it.
struct no_op {
  static constexpr const char* name = "none";
};

/// The buffers one segment of a call runs on. `in`/`out` hold T, `tmp` holds the accumulator type
/// (view_of takes the buffers from here; run_flat leaves `tmp` null and sets the view's scratch
/// base per segment).
template <class T, class Op>
struct exec_context {
  using red = reduction<T, Op>;
  using acc = typename red::acc;
  static constexpr bool reduces = !std::is_same_v<Op, no_op>;

  const T* in = nullptr;
  T* out = nullptr;
  acc* tmp = nullptr;
  const Op* op = nullptr;
  int world_size = 1;
  /// Reductions into `out` use streaming stores (detail/streaming_store.hpp): the call is too large
  /// for its results to stay in cache.
  bool stream_output = false;

  static constexpr std::size_t elem_size(schedule::buffer b) noexcept {
    return b == schedule::buffer::scratch ? sizeof(acc) : sizeof(T);
  }

  /// Whether p may be read or written as V. A transport's staging (shared-memory slots, MPI
  /// pieces) keeps element boundaries but not an alignment above 16 bytes: an alignas(32) element
  /// (an AVX vector) may sit at 48 mod 64 there, where aligned vector loads fault.
  template <class V>
  static bool aligned_for(const std::byte* p) noexcept {
    return reinterpret_cast<std::uintptr_t>(p) % alignof(V) == 0;
  }
  /// Element i of p as V, at any alignment (V need not be default-constructible).
  template <class V>
  static V load_at(const std::byte* p, std::size_t i) noexcept {
    std::array<std::byte, sizeof(V)> bytes;
    std::memcpy(bytes.data(), p + i * sizeof(V), sizeof(V));
    return std::bit_cast<V>(bytes);
  }
  /// Element i of p set to v, at any alignment.
  template <class V>
  static void store_at(std::byte* p, std::size_t i, const V& v) noexcept {
    std::memcpy(p + i * sizeof(V), &v, sizeof(V));
  }

  /// dst[0, n) = src[0, n), converting: T->T and acc->acc copy bits; T->acc widens; acc->T finalises.
  template <bool SrcAcc, bool DstAcc>
  void convert(const std::byte* src, std::byte* dst, std::size_t n) const {
    using S = std::conditional_t<SrcAcc, acc, T>;
    using D = std::conditional_t<DstAcc, acc, T>;
    if constexpr (SrcAcc == DstAcc) {
      if (src != dst) std::memmove(dst, src, n * sizeof(S));
    } else if (!aligned_for<S>(src) || !aligned_for<D>(dst)) {
      for (std::size_t i = 0; i < n; ++i) store_at<D>(dst, i, convert_one<SrcAcc>(load_at<S>(src, i)));
    } else {
      D* d = reinterpret_cast<D*>(dst);
      const S* s = reinterpret_cast<const S*>(src);
      for (std::size_t i = 0; i < n; ++i) d[i] = convert_one<SrcAcc>(s[i]);
    }
  }
  /// One value of convert's: T->acc widens, acc->T finalises.
  template <bool SrcAcc>
  auto convert_one(const std::conditional_t<SrcAcc, acc, T>& v) const {
    if constexpr (SrcAcc) return red::finalize(v, world_size);
    else return red::widen(v);
  }

  /// dst[i] = x_first ? op(x[i], a[i]) : op(a[i], x[i]) for i < n; dst may be a (same index).
  /// Streams into dst where stream_output says so, unless dst is scratch (read again soon).
  template <bool AAcc, bool XAcc, bool DstAcc>
  void combine(const std::byte* a, const std::byte* x, std::byte* dst, std::size_t n, bool x_first,
               bool dst_is_scratch) const {
    if constexpr (reduces) {
      if (x_first) combine_in_order<XAcc, AAcc, DstAcc>(x, a, dst, n, dst_is_scratch);
      else combine_in_order<AAcc, XAcc, DstAcc>(a, x, dst, n, dst_is_scratch);
    } else {
      (void)a, (void)x, (void)dst, (void)n, (void)x_first, (void)dst_is_scratch;
      COLLX_THROW(errc::internal, "reduction step in a collective without an op");
    }
  }

  /// dst[i] = op(first[i], second[i]) for i < n (combine with its operands in order: where both
  /// hold the same representation, both orders share this one instantiation of the loops).
  template <bool FirstAcc, bool SecondAcc, bool DstAcc>
  void combine_in_order(const std::byte* first, const std::byte* second, std::byte* dst, std::size_t n,
                        bool dst_is_scratch) const {
    using F = std::conditional_t<FirstAcc, acc, T>;
    using S = std::conditional_t<SecondAcc, acc, T>;
    using D = std::conditional_t<DstAcc, acc, T>;
    const F* pf = reinterpret_cast<const F*>(first);
    const S* ps = reinterpret_cast<const S*>(second);
    D* pd = reinterpret_cast<D*>(dst);
    auto wf = [](const F& v) -> acc { if constexpr (FirstAcc) return v; else return red::widen(v); };
    auto ws = [](const S& v) -> acc { if constexpr (SecondAcc) return v; else return red::widen(v); };
    auto st = [&](const acc& v) -> D {
      if constexpr (DstAcc) return v;
      else return red::finalize(v, world_size);
    };
    const Op& f = *op;
    if (!aligned_for<F>(first) || !aligned_for<S>(second) || !aligned_for<D>(dst)) {  // each element copied in and out
      for (std::size_t i = 0; i < n; ++i)
        store_at<D>(dst, i, st(red::combine(f, wf(load_at<F>(first, i)), ws(load_at<S>(second, i)))));
    } else if (stream_output && !dst_is_scratch) {
      store_streaming(pd, n, [&](std::size_t i) { return st(red::combine(f, wf(pf[i]), ws(ps[i]))); });
    } else {
      for (std::size_t i = 0; i < n; ++i) pd[i] = st(red::combine(f, wf(pf[i]), ws(ps[i])));
    }
  }

  /// Whether the representation a value lives in (accumulator or T) changes any computation: only
  /// where the accumulator is wider than T (narrow floats), or where results are finalised (avg).
  /// Otherwise every <SrcAcc, DstAcc> and <AAcc, XAcc, DstAcc> instantiation would compile the same
  /// loops, 4 + 8 copies per (T, Op) instead of 1 + 1.
  static constexpr bool representation_matters = red::widened || red::needs_finalize;

  /// Calls f with std::true_type or std::false_type as `b` says; where the representation does not
  /// matter, always with std::false_type (one instantiation).
  template <class F>
  static void with_flag(bool b, F&& f) {
    if constexpr (!representation_matters) {
      (void)b;
      f(std::false_type{});
    } else {
      if (b) f(std::true_type{});
      else f(std::false_type{});
    }
  }
};

/// One segment's buffers and typed kernels behind plain pointers, so that execute() (the loop over
/// the steps and the transport calls) compiles once per translation unit, not once per (T, Op):
/// only the conversions and reductions need the types. Half the code a collective instantiated per
/// (T, Op) was that loop, with a copy of its consumers per representation.
struct exec_view {
  const void* cx = nullptr;            ///< the exec_context<T, Op>
  const std::byte* base[3] = {};       ///< by schedule::buffer: input, output, scratch
  std::size_t value_size = 0, acc_size = 0;
  /// The exec_context's stream_output (set per call, after the view is made).
  const bool* stream_output = nullptr;
  /// dst[0, n) = src[0, n), from representation src_acc to dst_acc (exec_context::convert).
  void (*convert)(const void* cx, bool src_acc, bool dst_acc, const std::byte* src, std::byte* dst, std::size_t n) = nullptr;
  /// exec_context::combine; dst_acc also says that dst is scratch.
  void (*combine)(const void* cx, bool a_acc, bool x_acc, bool dst_acc, const std::byte* a, const std::byte* x,
                  std::byte* dst, std::size_t n, bool x_first) = nullptr;

  std::size_t elem_size(schedule::buffer b) const noexcept { return b == schedule::buffer::scratch ? acc_size : value_size; }
  const std::byte* cptr(const schedule::region& r) const noexcept {
    return base[static_cast<std::size_t>(r.buf)] + r.offset * elem_size(r.buf);
  }
  std::byte* ptr(const schedule::region& r) const noexcept { return const_cast<std::byte*>(cptr(r)); }
};

/// `cx` as an exec_view (valid while cx lives).
template <class T, class Op>
exec_view view_of(const exec_context<T, Op>& cx) {
  using C = exec_context<T, Op>;
  exec_view v;
  v.cx = &cx;
  v.base[static_cast<std::size_t>(schedule::buffer::input)] = reinterpret_cast<const std::byte*>(cx.in);
  v.base[static_cast<std::size_t>(schedule::buffer::output)] = reinterpret_cast<const std::byte*>(cx.out);
  v.base[static_cast<std::size_t>(schedule::buffer::scratch)] = reinterpret_cast<const std::byte*>(cx.tmp);
  v.value_size = C::elem_size(schedule::buffer::output);
  v.acc_size = C::elem_size(schedule::buffer::scratch);
  v.stream_output = &cx.stream_output;
  v.convert = [](const void* p, bool src_acc, bool dst_acc, const std::byte* src, std::byte* dst, std::size_t n) {
    const C& c = *static_cast<const C*>(p);
    C::with_flag(src_acc, [&](auto s) {
      C::with_flag(dst_acc, [&](auto d) { c.template convert<decltype(s)::value, decltype(d)::value>(src, dst, n); });
    });
  };
  v.combine = [](const void* p, bool a_acc, bool x_acc, bool dst_acc, const std::byte* a, const std::byte* x,
                 std::byte* dst, std::size_t n, bool x_first) {
    const C& c = *static_cast<const C*>(p);
    C::with_flag(a_acc, [&](auto fa) {
      C::with_flag(x_acc, [&](auto fx) {
        C::with_flag(dst_acc, [&](auto fd) {
          c.template combine<decltype(fa)::value, decltype(fx)::value, decltype(fd)::value>(a, x, dst, n, x_first, dst_acc);
        });
      });
    });
  };
  return v;
}

/// cx.combine of n elements (a, x and dst `as`, `xs` and `ds` bytes apart), in pieces of at most
/// 8 KiB of any operand, asking between them and after the last whether the communicator failed
/// (transport::failed_now; then check() throws the failure). The user's op is the one part of a
/// call that may be slow: abort() or fail() from it, a peer's failure or a timeout then ends the
/// call within a piece, not after a whole chunk (threads and shared memory; MPI answers false).
/// Pieces of 64 KiB where the output is streamed: each piece ends with a store fence.
inline void combine_checked(transport& t, const exec_view& cx, bool a_acc, bool x_acc, bool d_acc, const std::byte* a,
                            std::size_t as, const std::byte* x, std::size_t xs, std::byte* d, std::size_t ds,
                            std::size_t n, bool x_first) {
  const std::size_t piece_bytes = cx.stream_output && *cx.stream_output ? 65536 : 8192;
  const std::size_t piece = std::max<std::size_t>(1, piece_bytes / std::max({as, xs, ds}));
  for (std::size_t i = 0; i < n; i += piece) {
    const std::size_t len = std::min(piece, n - i);
    cx.combine(cx.cx, a_acc, x_acc, d_acc, a + i * as, x + i * xs, d + i * ds, len, x_first);
    if (t.failed_now()) t.check();
  }
}

/// Runs `steps` for one segment.
inline void execute(transport& t, const call_signature& sig, const schedule::steps& steps, const exec_view& cx) {
  using schedule::buffer;
  using schedule::step_kind;
  for (const schedule::step& s : steps) {
    switch (s.kind) {
      case step_kind::send:
        t.post_send(s.peer, cx.cptr(s.a), s.a.count * cx.elem_size(s.a.buf), cx.elem_size(s.a.buf), sig);
        break;
      case step_kind::recv: {
        const std::size_t ws = cx.elem_size(s.wire);
        std::byte* d = cx.ptr(s.dst);
        const std::size_t ds = cx.elem_size(s.dst.buf);
        const bool src_acc = s.wire == buffer::scratch, dst_acc = s.dst.buf == buffer::scratch;
        auto consume = [&](const std::byte* src, std::size_t off, std::size_t len) {
          cx.convert(cx.cx, src_acc, dst_acc, src, d + off / ws * ds, len / ws);
        };
        // Same representation on the wire and at the destination: a plain copy the transport may do itself.
        t.recv(s.peer, s.dst.count * ws, ws, sig, consumer_ref(consume, src_acc == dst_acc ? d : nullptr));
        break;
      }
      case step_kind::recv_reduce: {
        const std::size_t ws = cx.elem_size(s.wire);
        const std::byte* a = cx.cptr(s.a);
        const std::size_t as = cx.elem_size(s.a.buf);
        std::byte* d = cx.ptr(s.dst);
        const std::size_t ds = cx.elem_size(s.dst.buf);
        const bool a_acc = s.a.buf == buffer::scratch, x_acc = s.wire == buffer::scratch, d_acc = s.dst.buf == buffer::scratch;
        auto consume = [&](const std::byte* src, std::size_t off, std::size_t len) {
          const std::size_t e = off / ws;
          combine_checked(t, cx, a_acc, x_acc, d_acc, a + e * as, as, src, ws, d + e * ds, ds, len / ws, s.incoming_first);
        };
        t.recv(s.peer, s.dst.count * ws, ws, sig, consume);
        break;
      }
      case step_kind::copy:
        cx.convert(cx.cx, s.a.buf == buffer::scratch, s.dst.buf == buffer::scratch, cx.cptr(s.a), cx.ptr(s.dst), s.dst.count);
        break;
      case step_kind::reduce:
        combine_checked(t, cx, s.a.buf == buffer::scratch, s.b.buf == buffer::scratch, s.dst.buf == buffer::scratch,
                        cx.cptr(s.a), cx.elem_size(s.a.buf), cx.cptr(s.b), cx.elem_size(s.b.buf), cx.ptr(s.dst),
                        cx.elem_size(s.dst.buf), s.dst.count, false);
        break;
      case step_kind::wait_sends:
        t.wait_sends();
        break;
    }
  }
}

}  // namespace detail
}  // namespace v0
}  // namespace collx
