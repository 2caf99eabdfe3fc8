/// @file detail/signature_names.hpp
/// Names behind the hashes of a call signature. A signature carries the element type and the op as
/// 64-bit hashes of their names (fixed size, cheap to compare in every message header); to say
/// "rank 1 passes int32, rank 0 passes float32" rather than "another 4-byte type", each process
/// keeps the names of the types and ops its collectives are instantiated for. The ranks of a job
/// run the same program, so a rank can usually name a peer's type or op even if it never called
/// a collective on it itself.
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <typeinfo>
#include <unordered_map>

#include <collx/detail/type_name.hpp>
#include <collx/ops.hpp>

namespace collx {
inline namespace v0 {
namespace detail {

/// A map from hash to name, shared by the threads of a process. It keeps copies: a name may come
/// from a shared library unloaded later.
class name_table {
 public:
  /// Records `name` for `hash` (the first name stays); returns true.
  bool remember(std::uint64_t hash, std::string_view name) {
    const std::lock_guard<std::mutex> lock(mutex_);
    names_.try_emplace(hash, name);
    return true;
  }
  /// The name recorded for `hash`, if any.
  std::optional<std::string> find(std::uint64_t hash) {
    const std::lock_guard<std::mutex> lock(mutex_);
    const auto it = names_.find(hash);
    if (it == names_.end()) return std::nullopt;
    return it->second;
  }

 private:
  std::mutex mutex_;
  std::unordered_map<std::uint64_t, std::string> names_;
};

/// The names of element types and ops, by signature hash.
inline name_table& signature_names() {
  // Never destroyed: a communicator destroyed during static destruction may still describe a call.
  static name_table* t = new name_table;
  return *t;
}

/// Records `name` for `hash`; returns true.
inline bool remember_signature_name(std::uint64_t hash, std::string_view name) {
  return signature_names().remember(hash, name);
}

/// The name recorded for `hash`, if this process knows it.
inline std::optional<std::string> signature_name(std::uint64_t hash) { return signature_names().find(hash); }

/// The collx calls whose exchange is an all_gather of a type of their own, by the type's hash.
inline name_table& exchange_calls() {
  static name_table* t = new name_table;  // never destroyed, as signature_names()
  return *t;
}

/// Records that an all_gather of the type hashed `type_hash` (a type of collx's own, never a
/// user's) is the exchange inside collx call `call`, so that a rank making another
/// collective meanwhile is told its peers called `call`, not all_gather; returns true.
inline bool remember_exchange_call(std::uint64_t type_hash, std::string_view call) {
  return exchange_calls().remember(type_hash, call);
}

/// The collx call whose exchange is an all_gather of the type hashed `type_hash`, if there is one.
inline std::optional<std::string> exchange_call(std::uint64_t type_hash) { return exchange_calls().find(type_hash); }

/// What messages call op Op: its `name`, else (a user's lambda or struct) the compiler's spelling of
/// its type.
template <class Op>
constexpr std::string_view op_display_name() noexcept {
  if constexpr (requires { Op::name; }) return op_traits<Op>::name;
  else return pretty_type_name<Op>();
}

/// What identifies op Op in a signature: its `name` and, where RTTI is on, its mangled type name
/// (two op types that share a name, or a user op named "sum" against ops::sum, are different ops);
/// for an op without a name, its mangled type name (g++ spells two lambdas with the same
/// parameters alike, "main()::<lambda(float, float)>", while their mangled names differ), else
/// op_display_name.
template <class Op>
std::string_view op_signature_key() noexcept {
  if constexpr (requires { Op::name; }) {
#if defined(__GXX_RTTI) || defined(_CPPRTTI)
    static const std::string key = std::string(op_traits<Op>::name) + '/' + typeid(Op).name();
    return key;
#else
    return op_traits<Op>::name;
#endif
  } else {
#if defined(__GXX_RTTI) || defined(_CPPRTTI)
    return typeid(Op).name();
#else
    return pretty_type_name<Op>();
#endif
  }
}

/// call_signature::type_hash of T.
template <class T>
inline constexpr std::uint64_t type_signature_hash = fnv1a(type_name<T>());

/// call_signature::op_hash of Op (computed once).
template <class Op>
std::uint64_t op_signature_hash() noexcept {
  static const std::uint64_t hash = fnv1a(op_signature_key<Op>());
  return hash;
}

/// The names behind both hashes, recorded when the program starts for every type and op some
/// collective is instantiated with (odr-use `names_recorded<T, Op>` where the signature is made).
template <class T, class Op>
inline const bool names_recorded = remember_signature_name(type_signature_hash<T>, type_name<T>()) &&
                                   remember_signature_name(op_signature_hash<Op>(), op_display_name<Op>());

}  // namespace detail
}  // namespace v0
}  // namespace collx
