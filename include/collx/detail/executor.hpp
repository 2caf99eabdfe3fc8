/// @file detail/executor.hpp
/// Carries out one rank's schedule over a message transport: posts sends, receives into (or reduces
/// into) the right buffer with the conversions the buffers' types call for.
#pragma once

#include <cstddef>
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

/// The buffers one segment of a call runs on. `in`/`out` hold T, `tmp` holds the accumulator type.
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
  const std::byte* cptr(const schedule::region& r) const noexcept {
    switch (r.buf) {
      case schedule::buffer::input: return reinterpret_cast<const std::byte*>(in + r.offset);
      case schedule::buffer::output: return reinterpret_cast<const std::byte*>(out + r.offset);
      case schedule::buffer::scratch: return reinterpret_cast<const std::byte*>(tmp + r.offset);
    }
    return nullptr;
  }
  std::byte* ptr(const schedule::region& r) const noexcept { return const_cast<std::byte*>(cptr(r)); }

  // Values as typed by where they live: SrcAcc = the source holds accumulator values.
  template <bool SrcAcc>
  static acc load(const std::byte* p, std::size_t i) noexcept {
    if constexpr (SrcAcc) {
      acc v;
      std::memcpy(&v, p + i * sizeof(acc), sizeof(acc));
      return v;
    } else {
      T v;
      std::memcpy(&v, p + i * sizeof(T), sizeof(T));
      return red::widen(v);
    }
  }

  /// dst[0, n) = src[0, n), converting: T->T and acc->acc copy bits; T->acc widens; acc->T finalises.
  template <bool SrcAcc, bool DstAcc>
  void convert(const std::byte* src, std::byte* dst, std::size_t n) const {
    if constexpr (SrcAcc == DstAcc) {
      if (src != dst) std::memmove(dst, src, n * (SrcAcc ? sizeof(acc) : sizeof(T)));
    } else if constexpr (!SrcAcc && DstAcc) {
      acc* d = reinterpret_cast<acc*>(dst);
      const T* s = reinterpret_cast<const T*>(src);
      for (std::size_t i = 0; i < n; ++i) d[i] = red::widen(s[i]);
    } else {
      T* d = reinterpret_cast<T*>(dst);
      const acc* s = reinterpret_cast<const acc*>(src);
      for (std::size_t i = 0; i < n; ++i) d[i] = red::finalize(s[i], world_size);
    }
  }

  /// dst[i] = x_first ? op(x[i], a[i]) : op(a[i], x[i]) for i < n; dst may be a (same index).
  template <bool AAcc, bool XAcc, bool DstAcc>
  void combine(const std::byte* a, const std::byte* x, std::byte* dst, std::size_t n, bool x_first) const {
    if constexpr (reduces) {
      using A = std::conditional_t<AAcc, acc, T>;
      using X = std::conditional_t<XAcc, acc, T>;
      using D = std::conditional_t<DstAcc, acc, T>;
      const A* pa = reinterpret_cast<const A*>(a);
      const X* px = reinterpret_cast<const X*>(x);
      D* pd = reinterpret_cast<D*>(dst);
      auto wa = [](const A& v) -> acc { if constexpr (AAcc) return v; else return red::widen(v); };
      auto wx = [](const X& v) -> acc { if constexpr (XAcc) return v; else return red::widen(v); };
      auto st = [&](const acc& v) -> D {
        if constexpr (DstAcc) return v;
        else return red::finalize(v, world_size);
      };
      const Op& f = *op;
      if (!DstAcc && stream_output) {
        if (x_first) store_streaming(pd, n, [&](std::size_t i) { return st(red::combine(f, wx(px[i]), wa(pa[i]))); });
        else store_streaming(pd, n, [&](std::size_t i) { return st(red::combine(f, wa(pa[i]), wx(px[i]))); });
      } else if (x_first) {
        for (std::size_t i = 0; i < n; ++i) pd[i] = st(red::combine(f, wx(px[i]), wa(pa[i])));
      } else {
        for (std::size_t i = 0; i < n; ++i) pd[i] = st(red::combine(f, wa(pa[i]), wx(px[i])));
      }
    } else {
      (void)a, (void)x, (void)dst, (void)n, (void)x_first;
      COLLX_THROW(errc::internal, "reduction step in a collective without an op");
    }
  }

  template <class F>
  static void with_flag(bool b, F&& f) {
    if (b) f(std::true_type{});
    else f(std::false_type{});
  }
};

/// Runs `steps` for one segment.
template <class T, class Op>
void execute(transport& t, const call_signature& sig, const schedule::steps& steps, const exec_context<T, Op>& cx) {
  using schedule::buffer;
  using schedule::step_kind;
  using C = exec_context<T, Op>;
  for (const schedule::step& s : steps) {
    switch (s.kind) {
      case step_kind::send:
        t.post_send(s.peer, cx.cptr(s.a), s.a.count * C::elem_size(s.a.buf), C::elem_size(s.a.buf), sig);
        break;
      case step_kind::recv: {
        const std::size_t ws = C::elem_size(s.wire);
        std::byte* d = cx.ptr(s.dst);
        const std::size_t ds = C::elem_size(s.dst.buf);
        auto consume = [&](const std::byte* src, std::size_t off, std::size_t len) {
          C::with_flag(s.wire == buffer::scratch, [&](auto src_acc) {
            C::with_flag(s.dst.buf == buffer::scratch, [&](auto dst_acc) {
              cx.template convert<decltype(src_acc)::value, decltype(dst_acc)::value>(src, d + off / ws * ds,
                                                                                         len / ws);
            });
          });
        };
        // Same representation on the wire and at the destination: a plain copy the transport may do itself.
        const bool verbatim = (s.wire == buffer::scratch) == (s.dst.buf == buffer::scratch);
        t.recv(s.peer, s.dst.count * ws, ws, sig, consumer_ref(consume, verbatim ? d : nullptr));
        break;
      }
      case step_kind::recv_reduce: {
        const std::size_t ws = C::elem_size(s.wire);
        const std::byte* a = cx.cptr(s.a);
        const std::size_t as = C::elem_size(s.a.buf);
        std::byte* d = cx.ptr(s.dst);
        const std::size_t ds = C::elem_size(s.dst.buf);
        auto consume = [&](const std::byte* src, std::size_t off, std::size_t len) {
          const std::size_t e = off / ws;
          C::with_flag(s.a.buf == buffer::scratch, [&](auto a_acc) {
            C::with_flag(s.wire == buffer::scratch, [&](auto x_acc) {
              C::with_flag(s.dst.buf == buffer::scratch, [&](auto d_acc) {
                cx.template combine<decltype(a_acc)::value, decltype(x_acc)::value, decltype(d_acc)::value>(
                    a + e * as, src, d + e * ds, len / ws, s.incoming_first);
              });
            });
          });
        };
        t.recv(s.peer, s.dst.count * ws, ws, sig, consume);
        break;
      }
      case step_kind::copy:
        C::with_flag(s.a.buf == buffer::scratch, [&](auto src_acc) {
          C::with_flag(s.dst.buf == buffer::scratch, [&](auto dst_acc) {
            cx.template convert<decltype(src_acc)::value, decltype(dst_acc)::value>(cx.cptr(s.a), cx.ptr(s.dst),
                                                                                       s.dst.count);
          });
        });
        break;
      case step_kind::reduce:
        C::with_flag(s.a.buf == buffer::scratch, [&](auto a_acc) {
          C::with_flag(s.b.buf == buffer::scratch, [&](auto b_acc) {
            C::with_flag(s.dst.buf == buffer::scratch, [&](auto d_acc) {
              cx.template combine<decltype(a_acc)::value, decltype(b_acc)::value, decltype(d_acc)::value>(
                  cx.cptr(s.a), cx.cptr(s.b), cx.ptr(s.dst), s.dst.count, false);
            });
          });
        });
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
