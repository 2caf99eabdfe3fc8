/// @file nccl/call_check.hpp
/// The NCCL path's optional check that all ranks make the same call (nccl::options::check_calls_over).
/// NCCL does not compare its ranks' calls: ranks that disagree on the collective, type, op, root
/// or counts hang until NCCL's watchdog or an abort (or, for some mismatches, read the wrong bytes),
/// and a rank that refuses its arguments, or never calls, leaves the others hanging in NCCL. With a
/// host communicator of the same ranks, each collective call first exchanges a fixed-size
/// description of itself over it (one host all-gather): every rank then sees every rank's call and
/// throws the same collx::error before anything is enqueued, as collx's host transports do.
/// Point-to-point calls are not checked (nccl/collectives.cuh: call_shape says why). A debugging
/// aid, as MPI's correctness tools and NCCL's own debug check mode are: it blocks the calling
/// thread until every rank has made its call and costs a host collective per call (microseconds
/// over shared memory, more over MPI).
/// Plain C++ on collx's host API (no NCCL or CUDA headers): test_nccl_call_check runs it on thread
/// ranks without a GPU; nccl/collectives.cuh calls it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <collx/all_gather.hpp>
#include <collx/all_to_all.hpp>
#include <collx/allreduce.hpp>
#include <collx/communicator.hpp>
#include <collx/detail/dispatch.hpp>
#include <collx/error.hpp>
#include <collx/ops.hpp>

namespace collx {
inline namespace v0 {
namespace nccl {

/// One rank's call as the ranks compare it: fixed-size and trivially copyable, so that one host
/// all-gather of these checks a call. The ranks compare key, root, count and counts_hash; `what`
/// and `call` are for messages. Text fields are NUL-terminated, cut to fit.
struct call_signature {
  std::uint64_t call = 0;         ///< the NCCL communicator's checked call number, from 1 (for messages)
  std::uint64_t key = 0;          ///< hash of the whole `what` and of `identity` (make_signature)
  char what[64] = {};             ///< the collective with its type, op and path: "allreduce<float32,sum,nccl>"
  std::int64_t root = -1;         ///< the root, or -1 for a collective without one
  std::uint64_t count = 0;        ///< count in elements, as the call takes it (0 for the v-forms)
  std::uint64_t counts_hash = 0;  ///< all_gather_v / reduce_scatter_v: a hash of the counts; else 0
  std::int32_t refused = 0;       ///< 0, or the collx::errc (as int) with which this rank refused its arguments
  char reason[132] = {};          ///< why it refused them (the error's text, cut)
};

/// The signature of call number `call`: `what` as call_signature::what, `root` (-1: none),
/// `count` in elements, a v-form's `counts` (empty otherwise), and `identity`: what else must be
/// the same on every rank but `what` may not say in full (the op's own identity, the NCCL
/// communicator, its options), hashed into the key with the whole of `what` (which the text
/// field may cut: a long user type name).
inline call_signature make_signature(std::uint64_t call, std::string_view what, int root, std::size_t count,
                                     std::span<const std::size_t> counts = {}, std::uint64_t identity = 0) {
  call_signature s;
  s.call = call;
  char bytes[sizeof identity];
  std::memcpy(bytes, &identity, sizeof identity);
  s.key = collx::detail::fnv1a(std::string_view(bytes, sizeof bytes), collx::detail::fnv1a(what));
  std::memcpy(s.what, what.data(), std::min(what.size(), sizeof s.what - 1));
  s.root = root;
  s.count = count;
  s.counts_hash = counts.empty() ? 0 : collx::detail::hash_counts(counts);
  return s;
}

/// The signature `s` marked as refused with `code` and text `why` (a rank whose arguments were
/// bad still takes part in the exchange, so that the others learn why instead of hanging).
inline call_signature refused(call_signature s, errc code, std::string_view why) {
  s.refused = static_cast<std::int32_t>(code);
  std::memcpy(s.reason, why.data(), std::min(why.size(), sizeof s.reason - 1));
  return s;
}

/// "allreduce<float32,sum,nccl> count 100", with " root 2" where there is one and " (v-form
/// counts)" for the v-forms.
inline std::string describe(const call_signature& s) {
  std::string out(s.what, ::strnlen(s.what, sizeof s.what));
  if (s.counts_hash) out += " (v-form counts)";
  else out += " count " + std::to_string(s.count);
  if (s.root >= 0) out += " root " + std::to_string(s.root);
  return out;
}

namespace detail {
/// Errors name the check's all-gather as the call the user made, so that a rank making another
/// host collective meanwhile is not told its peers called all_gather<call_signature>.
inline const bool call_check_exchange_named = collx::detail::remember_exchange_call(
    collx::detail::type_signature_hash<call_signature>, "a collx::nccl call's check (options::check_calls_over)");

/// What to add to a message about two calls whose descriptions read alike but whose keys differ.
inline std::string unseen_difference(const call_signature& a, const call_signature& b) {
  if (a.key == b.key || std::strncmp(a.what, b.what, sizeof a.what) != 0) return {};
  return " (alike in words, but the op's own type, the NCCL communicator or its options differ, or a type "
         "name longer than the text shown)";
}
/// Whether two ranks' calls are the same call (key, root, count and counts).
inline bool same_call(const call_signature& a, const call_signature& b) noexcept {
  return a.key == b.key && a.root == b.root && a.count == b.count && a.counts_hash == b.counts_hash;
}
}  // namespace detail

/// Checks over `host` (the NCCL communicator's ranks, same numbers) that every rank makes the same
/// call as this one, `mine`; collective over host (one all-gather of call_signature, and a second
/// of the counts only when v-form counts differ, to name the entry). Every rank sees every
/// signature, so all ranks throw alike:
/// @param name this call's name in messages ("rank 1/4 nccl allreduce<float32,sum,nccl>")
/// @param counts this rank's v-form counts (empty otherwise)
/// @throws collx::error, on every rank: a rank's refusal, with that rank's code, naming it and its
///         reason (the refusing rank throws its own error itself; see nccl/collectives.cuh); else
///         errc::mismatch naming the first rank whose call differs from this rank's, and both calls
///         (and for counts, the first entry that differs). Errors of `host` pass through (a rank
///         that never makes the call: errc::timeout after host's timeout).
inline void check_same_call(collx::communicator& host, const call_signature& mine, const std::string& name,
                            std::span<const std::size_t> counts = {}) {
  const auto n = static_cast<std::size_t>(host.size());
  std::vector<call_signature> all(n);
  collx::all_gather(host, std::span<const call_signature>(&mine, 1), std::span<call_signature>(all));
  for (std::size_t p = 0; p < n; ++p)
    if (all[p].refused && static_cast<int>(p) != host.rank())
      COLLX_THROW(static_cast<errc>(all[p].refused),
                  name + ": rank " + std::to_string(p) + " refused its call: " +
                      std::string(all[p].reason, ::strnlen(all[p].reason, sizeof all[p].reason)));
  if (mine.refused) return;  // the caller throws its own error
  // Every rank decides from the same signatures, so all take the same branch: return, throw, or
  // (when only v-form counts differ) gather the counts together to name the entry.
  const auto differs = [&](const call_signature& s) { return !detail::same_call(s, mine); };
  const auto q = static_cast<std::size_t>(std::find_if(all.begin(), all.end(), differs) - all.begin());
  const bool all_same =
      std::all_of(all.begin(), all.end(), [&](const call_signature& s) { return detail::same_call(s, all[0]); });
  if (all_same) return;
  const bool only_counts = std::all_of(all.begin(), all.end(), [&](const call_signature& s) {
    return s.key == all[0].key && s.root == all[0].root && s.count == all[0].count;
  });
  if (!only_counts)
    COLLX_THROW(errc::mismatch, name + " (checked call #" + std::to_string(mine.call) + "): rank " + std::to_string(q) +
                                    " calls " + describe(all[q]) + ", this rank " + describe(mine) +
                                    detail::unseen_difference(all[q], mine));
  std::vector<std::size_t> every(n * n);
  std::vector<std::size_t> own(n, 0);
  std::copy_n(counts.begin(), std::min(counts.size(), n), own.begin());
  collx::all_gather(host, std::span<const std::size_t>(own), std::span<std::size_t>(every));
  for (std::size_t p = 0; p < n; ++p)
    for (std::size_t i = 0; i < n; ++i)
      if (every[p * n + i] != own[i])
        COLLX_THROW(errc::mismatch, name + " (checked call #" + std::to_string(mine.call) + "): rank " +
                                        std::to_string(p) + "'s counts[" + std::to_string(i) + "] is " +
                                        std::to_string(every[p * n + i]) + ", this rank's " + std::to_string(own[i]) +
                                        " (the counts must be the same on every rank)");
}

/// all_to_all_v's pairs over `host`: rank q's send_counts[r] must equal rank r's recv_counts[q].
/// One host all_to_all of the send counts (each rank learns what each peer sends it) and one
/// allreduce (min) of the lowest rank that found a pair that disagrees, so that all throw alike.
/// Collective over host; call after check_same_call.
/// @throws collx::error (errc::mismatch) on every rank: the rank that found it names the pair, the
///         others name that rank. Errors of `host` pass through.
inline void check_all_to_all_counts(collx::communicator& host, std::span<const std::size_t> send_counts,
                                    std::span<const std::size_t> recv_counts, const std::string& name) {
  const auto n = static_cast<std::size_t>(host.size());
  std::vector<std::size_t> sent_to_me(n);
  collx::all_to_all(host, send_counts, std::span<std::size_t>(sent_to_me));
  std::size_t bad = n;
  for (std::size_t q = 0; q < n && bad == n; ++q)
    if (sent_to_me[q] != recv_counts[q]) bad = q;
  std::uint64_t first[1] = {bad < n ? static_cast<std::uint64_t>(host.rank()) : n};
  collx::allreduce(host, std::span<std::uint64_t>(first), ops::min{});
  if (bad < n)
    COLLX_THROW(errc::mismatch, name + ": rank " + std::to_string(bad) + " sends this rank " +
                                    std::to_string(sent_to_me[bad]) + " elements (its send_counts[" +
                                    std::to_string(host.rank()) + "]) but recv_counts[" + std::to_string(bad) +
                                    "] here is " + std::to_string(recv_counts[bad]));
  if (first[0] < n)
    COLLX_THROW(errc::mismatch, name + ": rank " + std::to_string(first[0]) +
                                    "'s recv_counts disagree with its peers' send_counts (its message names the pair)");
}

}  // namespace nccl
}  // namespace v0
}  // namespace collx
