/// @file transport/transport.hpp
/// The message transport interface every executor talks to, and the call signature that travels
/// with each message so that ranks which disagree fail cleanly instead of hanging.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <string_view>
#include <vector>

#include <collx/algo/automatic.hpp>
#include <collx/algo/schedule.hpp>
#include <collx/detail/signature_names.hpp>
#include <collx/detail/wait_graph.hpp>
#include <collx/error.hpp>

namespace collx {
inline namespace v0 {

namespace detail {
/// The longest wait collx arms, about 100 years: longer timeouts (up to
/// std::chrono::milliseconds::max(), "never") are taken as this, so that a deadline in nanoseconds
/// (steady_clock's, a GPU kernel's) cannot overflow into the past and fail at once.
inline constexpr std::chrono::milliseconds longest_wait = std::chrono::hours(24 * 365 * 100);
}  // namespace detail

/// What every rank must agree on for one call. Sent with every message; the receiver compares.
struct call_signature {
  std::uint64_t seq = 0;          ///< the call's sequence number on this communicator (from 1)
  std::uint64_t count = 0;        ///< elements: the vector (allreduce/reduce/broadcast), per-rank block
                                  ///< (reduce_scatter/all_gather/all_to_all), total for v-forms
  std::uint64_t type_hash = 0;    ///< hash of the element type's name
  std::uint64_t op_hash = 0;      ///< hash of the op's name and type (detail::op_signature_key; 0: no op)
  std::uint64_t layout_hash = 0;  ///< hash of per-rank counts (v-forms), else 0
  std::uint32_t type_size = 0;    ///< sizeof(element)
  std::int32_t root = -1;         ///< broadcast/reduce root, else -1
  collective coll = collective::allreduce;  ///< the collective (send_recv for point-to-point)
  std::uint8_t algo = 0;          ///< the resolved algorithm (collx::algorithm), or hierarchical_signature_algo
  std::uint8_t varying = 0;       ///< 1: the collective's v-form (a count per rank)
  /// Digest of this rank's calls before this one on the communicator (history_digest): ranks whose
  /// records of a finished call differ, though no message of that call showed it (a broadcast root
  /// that only sends, an algo::hierarchical call whose levels never met), differ here at their
  /// next message. 0 for point-to-point messages.
  std::uint64_t earlier = 0;
  /// Equal in every field: the ranks agree on the call.
  constexpr bool operator==(const call_signature&) const = default;
};

/// The digest of the calls before and including `sig` (call_signature::earlier of the next call):
/// `earlier` (the digest before it) mixed with every field of sig but itself.
constexpr std::uint64_t history_digest(std::uint64_t earlier, const call_signature& sig) noexcept {
  std::uint64_t h = earlier ^ 0x9e3779b97f4a7c15ull;
  const auto mix = [&h](std::uint64_t v) {
    h = (h ^ v) * 0x100000001b3ull;
    h ^= h >> 29;
  };
  mix(sig.seq);
  mix(sig.count);
  mix(sig.type_hash);
  mix(sig.op_hash);
  mix(sig.layout_hash);
  mix(sig.type_size);
  mix(static_cast<std::uint32_t>(sig.root));
  mix(static_cast<std::uint64_t>(sig.coll) << 16 | std::uint64_t{sig.algo} << 8 | sig.varying);
  return h;
}

/// call_signature::algo of an algo::hierarchical call, which the world communicator announces
/// (its levels run calls of their own, with their own signatures): no collx::algorithm value.
inline constexpr std::uint8_t hierarchical_signature_algo = 0x80;

/// The name of call_signature::algo: "ring", "tree", "direct" or "hierarchical".
inline std::string signature_algorithm_name(std::uint8_t a) {
  return a == hierarchical_signature_algo ? "hierarchical" : std::string(algorithm_name(static_cast<algorithm>(a)));
}

/// The collective a signature names, as the user called it ("all_gather_v" for the v-form; the
/// collx call, "collx::split", for the all_gather that call makes of a type of its own).
inline std::string called(const call_signature& c) {
  if (c.coll == collective::all_gather && !c.varying)
    if (auto call = detail::exchange_call(c.type_hash)) return *call;
  return std::string(collective_name(c.coll)) + (c.varying ? "_v" : "");
}

/// Names the first field in which rank `peer`'s signature `theirs` differs from rank `me`'s `mine`,
/// or "" if they agree.
inline std::string describe_mismatch(const call_signature& mine, int me, const call_signature& theirs, int peer) {
  const std::string rp = "rank " + std::to_string(peer), rm = "rank " + std::to_string(me);
  auto field = [&](const char* name, auto b, auto a) {
    return std::string(name) + " differs: " + rp + " has " + std::to_string(b) + ", " + rm + " has " +
           std::to_string(a);
  };
  if (mine.seq != theirs.seq) {
    auto at = [](const call_signature& c) { return "call #" + std::to_string(c.seq) + " (" + called(c) + ")"; };
    if (mine.seq && theirs.seq)
      return "call sequence differs: " + rp + " is at " + at(theirs) + ", " + rm + " at " + at(mine) +
             ": a rank skipped or added a call, or passed a count of zero where others did not";
    // seq 0: a point-to-point call (send, recv, send_recv), which collectives do not number; only
    // messages carry it (the peer's, received here), and the peer may have left that call since.
    return "call sequence differs: " + rp + "'s message is from " +
           (theirs.seq ? at(theirs) : std::string("a point-to-point call (send or send_recv)")) + ", " + rm + " is " +
           (mine.seq ? "at " + at(mine) : std::string("in a point-to-point call (recv or send_recv)")) +
           ": the two ranks' point-to-point calls and collectives do not pair up in the same order";
  }
  if (called(mine) != called(theirs))  // also split's exchange against a user's all_gather
    return "collective differs: " + rp + " called " + called(theirs) + ", " + rm + " called " + called(mine);
  // Counts named as the user passed them: the signature holds a block's count where the call takes n blocks.
  const char* count_name = "count";
  if (mine.varying) count_name = "count (the sum of the per-rank counts)";
  else if (mine.coll == collective::all_to_all) count_name = "count per block (the send count / world size)";
  else if (mine.coll == collective::reduce_scatter) count_name = "count per rank (the recv count; send holds world size times it)";
  else if (mine.coll == collective::all_gather) count_name = "count per rank (the send count; recv holds world size times it)";
  // The type before the count: ranks passing float and double over the same bytes differ in both,
  // and the type is the cause.
  if (mine.type_size != theirs.type_size || mine.type_hash != theirs.type_hash) {
    auto type = [](const call_signature& c) {
      const std::string bytes = std::to_string(c.type_size) + "-byte";
      const auto name = detail::signature_name(c.type_hash);
      return name ? *name + " (" + bytes + ")" : "a " + bytes + " type";
    };
    return "element type differs: " + rp + " passes " + type(theirs) + ", " + rm + " passes " + type(mine) +
           (mine.count != theirs.count ? "; " + field(count_name, theirs.count, mine.count) : "");
  }
  if (mine.count != theirs.count) return field(count_name, theirs.count, mine.count);
  if (mine.op_hash != theirs.op_hash) {
    auto op = [](const call_signature& c) {
      const auto name = detail::signature_name(c.op_hash);
      return name ? *name : std::string("another op");
    };
    const std::string a = op(theirs), b = op(mine);
    return "reduction op differs: " + rp + " reduces with " + a + ", " + rm + " with " + b +
           (a == b ? " (two op types of that name)" : "");
  }
  if (mine.root != theirs.root) return field("root", theirs.root, mine.root);
  if (mine.algo != theirs.algo)
    return "algorithm differs: " + rp + " runs " + signature_algorithm_name(theirs.algo) + ", " + rm + " runs " +
           signature_algorithm_name(mine.algo);
  if (mine.layout_hash != theirs.layout_hash) {
    // A ring call's hash also holds communicator_options::ring_order (dispatch.hpp): say both.
    if (mine.algo == static_cast<std::uint8_t>(algorithm::ring))
      return "per-rank counts differ (or the ring order, communicator_options::ring_order) between " + rp + " and " + rm;
    return "per-rank counts differ between " + rp + " and " + rm;
  }
  if (mine.earlier != theirs.earlier)
    return "an earlier call differs: " + rp + "'s record of the calls before #" + std::to_string(mine.seq) +
           " is not " + rm + "'s (both finished a call they disagreed on without a message showing it: a root, "
           "count or op that differed in a broadcast whose root only sent, or in an algo::hierarchical call whose "
           "levels never met)";
  return {};
}

/// One call in words, for error messages: "allreduce #3 (1024 elements of a 4-byte type, ring)".
inline std::string describe_call(const call_signature& c) {
  const std::string size = std::to_string(c.type_size);
  const bool vowel = size[0] == '8' || size == "11" || size == "18";  // "an 8-byte type", "an 18-byte type"
  std::string s = called(c) + " #" + std::to_string(c.seq) + " (" + std::to_string(c.count) +
                  (c.varying ? " elements in all" : c.count == 1 ? " element" : " elements") + (vowel ? " of an " : " of a ") +
                  size + "-byte type";
  if (c.root >= 0) s += ", root " + std::to_string(c.root);
  return s + ", " + signature_algorithm_name(c.algo) + ")";
}

namespace detail {
/// Rank `rank` as messages name it: "rank 1"; on a level of a hierarchy or a split group, whose
/// rank i is world rank `world_ranks[i]` (empty elsewhere), "rank 1 (world rank 3)", so that the
/// rank reads right on the whole communicator. `also` joins the parentheses: "rank 1 (world rank
/// 3, pid 4242)", "rank 1 (pid 4242)".
inline std::string rank_name(int rank, const std::vector<int>& world_ranks, const std::string& also = {}) {
  std::string in;
  if (rank >= 0 && static_cast<std::size_t>(rank) < world_ranks.size())
    in = "world rank " + std::to_string(world_ranks[static_cast<std::size_t>(rank)]);
  if (!also.empty()) in += (in.empty() ? "" : ", ") + also;
  return "rank " + std::to_string(rank) + (in.empty() ? "" : " (" + in + ")");
}

/// What a peer's published wait says, for whereabouts: "it waits for " `words` " rank " `peer`
/// (named by rank_name with `world_ranks`; `peer` -1: `words` alone, e.g. its sends to be
/// delivered), adding when `peer` is this rank `me` that each waits for the other (unless the peer
/// is `stopped`: what it waits for may well be there, it cannot look).
inline std::string wait_text(const char* words, int peer, int me, const std::vector<int>& world_ranks,
                             bool stopped = false) {
  std::string s = std::string("it waits for ") + words;
  if (peer < 0) return s;
  s += " " + rank_name(peer, world_ranks);
  if (peer == me) s += stopped ? ", this rank" : ", this rank: each waits for the other";
  return s;
}

/// Where a rank stands, in words, for a timeout's message (every host transport): `who`, the rank
/// as rank_name names it ("rank 1", "rank 1 (world rank 3)"); its latest announced collective call
/// `theirs` (`has_call`: it announced one) against this rank's current call `mine` (`call_seq`:
/// the call of the message this rank sent or received last, 0 in a point-to-point call), then
/// `waits` ("it waits for a message from rank 2"; "" when it blocks on nothing). `stopped`: the
/// caller has said the rank is stopped, so a rank blocking on nothing is not guessed about.
inline std::string whereabouts(const std::string& who, bool has_call, const call_signature& theirs,
                               const call_signature& mine, std::uint64_t call_seq, const std::string& waits,
                               bool stopped) {
  const std::string then = waits.empty() ? "" : "; " + waits;
  // Blocking on nothing here, a rank may wait on another communicator (a split group, a level of
  // a hierarchy): a cycle through two communicators is seen by neither.
  const std::string idle =
      stopped ? "blocks on nothing" : "blocks on nothing here: it is late, stuck, or waiting on another communicator";
  if (!has_call)  // point-to-point calls announce nothing
    return who + " has made no collective call on this communicator yet" + (waits.empty() ? ", and " + idle : then);
  if (call_seq == 0)  // this rank is in a point-to-point call: the last collectives say little
    return who + "'s last collective call on this communicator is its " + describe_call(theirs) +
           (waits.empty() ? "; it " + idle : then);
  if (theirs.seq < mine.seq)
    return who + " is still in or after its " + describe_call(theirs) + ", before this call" +
           (waits.empty() ? (stopped ? "" : ": it is late, stuck, or waiting on another communicator") : then);
  if (theirs == mine)
    return who + " is in this call too" + (waits.empty() ? (stopped ? ", not blocked" : ", not blocked: it is busy, or stopped") : then);
  if (theirs.seq > mine.seq) return who + " is already in its " + describe_call(theirs) + ", a later call" + then;
  return who + " is in its " + describe_call(theirs) + ": it called something else" + then;
}
}  // namespace detail

/// How many of its latest calls a rank keeps published for its peers (threads and shm transports):
/// a rank whose part of a call was empty returns at once and goes on, and a peer still waiting in
/// that call must find its record among the later ones.
inline constexpr std::size_t published_call_history = 8;

/// Whether two signatures differ in call_signature::earlier only: the same call, which the two
/// ranks agree on, after earlier calls they did not agree on.
inline bool differ_only_in_earlier(call_signature a, call_signature b) noexcept {
  const bool earlier_differs = a.earlier != b.earlier;
  a.earlier = b.earlier = 0;
  return earlier_differs && a == b;
}

/// Where calls `mine` (this rank's, `me`) and `theirs` (rank `peer`'s of the same call) differ
/// only in call_signature::earlier: the first earlier call whose records, as both ranks still
/// publish them (`record`, as first_disagreement's), differ, described; "" otherwise.
template <class Record>
std::string earlier_disagreement(const call_signature& mine, int me, const call_signature& theirs, int peer,
                                 Record&& record) {
  if (!differ_only_in_earlier(mine, theirs)) return {};
  call_signature a, b;
  const std::uint64_t from = mine.seq > published_call_history ? mine.seq - published_call_history + 1 : 1;
  for (std::uint64_t s = from; s < mine.seq; ++s)
    if (record(me, s, a) && record(peer, s, b) && a.seq == s && b.seq == s && !(a == b))
      return describe_mismatch(a, me, b, peer) + " (in " + describe_call(a) + ", which both ranks finished; seen at call #" +
             std::to_string(mine.seq) + ")";
  return {};
}

/// describe_mismatch, or where the calls differ only in their earlier calls, the first earlier
/// call whose published records differ (earlier_disagreement).
template <class Record>
std::string describe_mismatch_from_records(const call_signature& mine, int me, const call_signature& theirs, int peer,
                                           Record&& record) {
  std::string why = earlier_disagreement(mine, me, theirs, peer, record);
  return why.empty() ? describe_mismatch(mine, me, theirs, peer) : why;
}

/// The mismatch message for the first rank whose records disagree with this rank's, "" if none
/// does: its record of call `mine` (the same sequence number; found in its history when it has
/// gone on), or, when it is still in an earlier call that this rank finished, that call's record
/// against this rank's own. `record(r, seq, out)` fills in rank r's record of call `seq` (0: its
/// latest; r may be `me`), returning false where r has none (not yet, or no longer). The
/// transports that publish each rank's calls (threads, shm) compare them this way while they
/// wait, so ranks that disagree learn it even when no message between them would show it (a root
/// that only sends; a hierarchical call whose ranks took different level calls and never met).
template <class Record>
std::string first_disagreement(const call_signature& mine, int me, int n, Record&& record) {
  if (!mine.seq) return {};
  for (int r = 0; r < n; ++r) {
    if (r == me) continue;
    call_signature theirs, mine_then;
    if (record(r, mine.seq, theirs)) {  // r is in this call, or past it
      if (theirs.seq == mine.seq && !(theirs == mine)) return describe_mismatch_from_records(mine, me, theirs, r, record);
      continue;
    }
    if (record(r, 0, theirs) && theirs.seq < mine.seq && record(me, theirs.seq, mine_then) &&
        mine_then.seq == theirs.seq && !(mine_then == theirs)) {  // r is still in a call this rank finished
      const std::string earlier = earlier_disagreement(mine_then, me, theirs, r, record);
      if (!earlier.empty()) return earlier;
      // Named by rank, not "this rank": a failure's text is passed on to the peers as it is.
      const std::string m = "rank " + std::to_string(me);
      return describe_mismatch(mine_then, me, theirs, r) + " (in " + m + "'s " + describe_call(mine_then) + ", which " + m +
             " finished and rank " + std::to_string(r) + " is still in; seen at " + m + "'s call #" +
             std::to_string(mine.seq) + ")";
    }
  }
  return {};
}

/// The error of a deadlock that detail::find_wait_cycle found: "deadlock: rank 0 in a
/// point-to-point call waits for rank 1 to receive its messages; rank 1 in broadcast #1 waits for a
/// message from rank 0; each waits for the next, so none can go on", then " (" + send_advice + ")"
/// if a point-to-point send waits in the cycle (how to order sends). `receiving(w)`: wait w is for
/// a message (else for the peer to read this rank's); `announced(r, seq, sig)` looks up rank r's
/// call seq, to name it; `world_ranks`: as detail::rank_name's (on a level or split group, each
/// rank is named with its world rank too).
template <class Receiving, class Announced>
std::string deadlock_message(const std::vector<std::pair<int, detail::wait_record>>& cycle, Receiving&& receiving,
                             Announced&& announced, std::string_view send_advice, const std::vector<int>& world_ranks) {
  std::string why = "deadlock: ";
  bool sends = false;
  for (const auto& [r, w] : cycle) {
    call_signature sig;
    const std::string call = w.seq && announced(r, w.seq, sig) ? called(sig) + " #" + std::to_string(w.seq)
                                                               : "a point-to-point call";
    sends = sends || (w.seq == 0 && !receiving(w));
    const std::string peer = detail::rank_name(w.peer, world_ranks);
    why += detail::rank_name(r, world_ranks) + " in " + call +
           (receiving(w) ? " waits for a message from " + peer : " waits for " + peer + " to receive its messages") + "; ";
  }
  why += "each waits for the next, so none can go on";
  if (sends) why += " (" + std::string(send_advice) + ")";
  return why;
}

/// Why this rank's (`me`) wait in call `mine` on rank `peer` can never end: `peer` has announced
/// call `peer_seq`, a later one, so it finished `mine` without sending this rank the message it
/// waits for (`consuming`: without reading the message this rank sent it), which a rank that agrees
/// on the call does not do (its messages of a call are all posted, and those it receives all read,
/// before it returns). first_disagreement names the field instead while the peer's record of the
/// call is still published (its last published_call_history calls): went_past_holds_record says
/// whether it is, and a transport tries first_disagreement first; this is the message once the
/// peer has gone further (or, `record_gone` false, if its record matches and names nothing).
inline std::string went_past_message(const call_signature& mine, int me, int peer, std::uint64_t peer_seq, bool consuming,
                                     bool record_gone) {
  const std::string p = std::to_string(peer);
  return "rank " + p + " finished call #" + std::to_string(mine.seq) + " without " +
         (consuming ? "reading the message rank " + std::to_string(me) + " sent it"
                    : "sending rank " + std::to_string(me) + " the message it waits for") +
         " and went on to call #" + std::to_string(peer_seq) + ": the ranks disagree on rank " + std::to_string(me) + "'s " +
         describe_call(mine) + " (a count of 0 against a count, a root, or another collective" +
         (record_gone ? "; rank " + p + " has gone on too far for its record of the call to name the field)" : ")");
}

/// Whether a peer that announced call `peer_seq` still publishes its record of call `seq` (its
/// history holds its last published_call_history calls).
constexpr bool went_past_holds_record(std::uint64_t seq, std::uint64_t peer_seq) noexcept {
  return peer_seq < seq + published_call_history;
}

/// The mismatch message for a message of rank `from`'s call `got` that arrived in this rank's
/// (`me`) call `sig`, from the ranks' published records (`record`, as first_disagreement's). When
/// the two belong to different calls, one rank finished a call the other is still in (a root that
/// only sends returns early): if that call's records differ (this rank's, or the sender's), that
/// difference is the cause, so name it rather than the sequence numbers.
template <class Record>
std::string describe_message_mismatch(const call_signature& got, const call_signature& sig, int me, int from,
                                      Record&& record) {
  call_signature mine, theirs;
  if (got.seq < sig.seq && record(me, got.seq, mine) && mine.seq == got.seq && !(mine == got)) {  // the sender is behind
    const std::string earlier = earlier_disagreement(mine, me, got, from, record);
    if (!earlier.empty()) return earlier;
    const std::string m = "rank " + std::to_string(me);  // (passed on to the peers as it is)
    return describe_mismatch(mine, me, got, from) + " (in " + m + "'s " + describe_call(mine) + ", which " + m +
           " finished before seeing it; seen at " + m + "'s call #" + std::to_string(sig.seq) + ")";
  }
  if (got.seq > sig.seq && record(from, sig.seq, theirs) && theirs.seq == sig.seq && !(theirs == sig)) {  // ahead
    const std::string earlier = earlier_disagreement(sig, me, theirs, from, record);
    if (!earlier.empty()) return earlier;
    return describe_mismatch(sig, me, theirs, from) + " (rank " + std::to_string(from) + " finished " +
           describe_call(theirs) + " and went on to call #" + std::to_string(got.seq) + ")";
  }
  return describe_mismatch_from_records(sig, me, got, from, record);
}


/// Why a message of `sent` bytes from rank `peer` does not fit rank `me`'s `expected` though their
/// call signatures `sig` (counts included) agree. In all_to_all_v, whose signature cannot hold
/// every pair's count, the sender's send_counts[me] and the receiver's recv_counts[peer] differ;
/// elsewhere the ranks cut the call into different messages, which differing
/// communicator_options::max_segment_bytes (COLLX_SEGMENT_BYTES) do.
inline std::string message_size_mismatch(const call_signature& sig, int peer, std::uint64_t sent, int me,
                                          std::uint64_t expected) {
  const std::string p = std::to_string(peer), m = std::to_string(me);
  if (sig.coll == collective::all_to_all && sig.varying && sig.type_size && sent % sig.type_size == 0 &&
      expected % sig.type_size == 0)
    return "count differs: rank " + p + "'s send_counts[" + m + "] is " + std::to_string(sent / sig.type_size) +
           " but rank " + m + "'s recv_counts[" + p + "] is " + std::to_string(expected / sig.type_size) +
           " (all_to_all_v: what one rank sends another must be what that rank expects from it)";
  return "message size differs: rank " + p + " sends " + std::to_string(sent) + " bytes, rank " + m + " expects " +
         std::to_string(expected) +
         " (the calls agree, so the ranks cut them differently: COLLX_SEGMENT_BYTES, or "
         "communicator_options::max_segment_bytes, must be the same on every rank)";
}

/// A failure as the other ranks read it: "rank R failed: why", so that a relayed error does not
/// read as their own (unchanged when `why` already starts with "rank R ", or with "rank Q failed: "
/// for another rank Q: a failure this rank passes on).
inline std::string reported_by(int rank, const std::string& why) {
  const std::string me = "rank " + std::to_string(rank) + " ";
  if (why.rfind(me, 0) == 0) return why;
  // Another rank's failure passed on ("rank 0 failed: ..."): it stays that rank's.
  std::size_t d = 5;
  while (d < why.size() && why[d] >= '0' && why[d] <= '9') ++d;
  if (why.rfind("rank ", 0) == 0 && d > 5 && why.compare(d, 9, " failed: ") == 0) return why;
  return me + "failed: " + why;
}

/// Which world ranks a level's ranks are, for messages in the level's numbering: "its ranks 0, 1
/// are world ranks 2, 3" (`world_ranks[i]`: the world rank of the level's rank i).
inline std::string level_ranks_text(const std::vector<int>& world_ranks) {
  std::string a, b;
  for (std::size_t i = 0; i < world_ranks.size(); ++i) {
    // append, not `"..." + std::string`: g++ 12 warns falsely (-Wrestrict) on the latter at -O2.
    a.append(i ? ", " : "").append(std::to_string(i));
    b.append(i ? ", " : "").append(std::to_string(world_ranks[i]));
  }
  const bool several = world_ranks.size() > 1;
  return "its rank" + std::string(several ? "s " : " ") + a + (several ? " are" : " is") + " world rank" +
         (several ? "s " : " ") + b;
}

namespace detail {
/// How long a wait must have lasted before another rank's timeout that ends it is read with
/// own_wait_note's line (shorter waits say nothing the first timeout does not).
inline constexpr std::chrono::milliseconds own_wait_note_after{100};

/// What rank `me` ("rank 2", or with its world rank: transport::peer_name) adds to another rank's
/// timeout that ended its wait of `waited` for `what` ("a message from rank 1"), or "" before
/// own_wait_note_after: every rank reads the first timeout, which names only the peer its own rank
/// waited for; that peer may itself have waited for the rank that is stuck (in code of the user's,
/// say), which this line then names.
inline std::string own_wait_note(const std::string& me, std::chrono::milliseconds waited, const std::string& what) {
  if (waited < own_wait_note_after) return {};
  return "; " + me + " had itself waited " + std::to_string(waited.count()) + " ms for " + what;
}
}  // namespace detail

/// reported_by undone for the rank that failed: its own failure, as it reads it back from a peer
/// or another level of its hierarchy, reads as its own ("why", not "rank R failed: why").
inline std::string as_seen_by(int rank, std::string why) {
  const std::string prefix = "rank " + std::to_string(rank) + " failed: ";
  if (why.rfind(prefix, 0) == 0) why.erase(0, prefix.size());
  return why;
}

/// Receives bytes [offset, offset + len) of a message, readable at `src` until it returns.
/// A transport may deliver one message in several pieces, each a whole number of elements.
///
/// A consumer that only copies the bytes verbatim says so with `copy_to`: then byte i of the
/// message belongs at copy_to() + i, and a transport may put it there itself instead of calling the
/// consumer (process_vm_readv straight into the user's buffer: one copy fewer). Either way the
/// result is the same. A transport writes there only while recv() runs: nothing may land in a
/// user's buffer after a failed call returned (why the MPI transport, whose receives would stay
/// posted, does not use it).
class consumer_ref {
 public:
  /// Refers to `f`, callable as f(src, offset, len) (not copied: it must outlive this reference);
  /// `copy_to`: where the message's bytes go verbatim, or nullptr (see copy_to()).
  template <class F>
    requires(!std::is_same_v<std::remove_cv_t<F>, consumer_ref>)  // copying must not wrap (and lose copy_to)
  consumer_ref(F& f, std::byte* copy_to = nullptr) noexcept  // NOLINT: implicit by design, like std::function_ref
      : obj_(&f),
        fn_([](void* o, const std::byte* s, std::size_t off, std::size_t len) { (*static_cast<F*>(o))(s, off, len); }),
        copy_to_(copy_to) {}
  /// Passes bytes [offset, offset + len) of the message, at `src`, to the consumer.
  void operator()(const std::byte* src, std::size_t offset, std::size_t len) const { fn_(obj_, src, offset, len); }
  /// Where the message's bytes go verbatim, or nullptr when the consumer converts or reduces them.
  std::byte* copy_to() const noexcept { return copy_to_; }

 private:
  void* obj_;
  void (*fn_)(void*, const std::byte*, std::size_t, std::size_t);
  std::byte* copy_to_;
};

/// A message transport between the ranks of one communicator. Implementations: threads of one
/// process (transport/threads.hpp), processes over shared memory (transport/shm.hpp) and over MPI
/// (transport/mpi.hpp).
/// All functions but abort() are called by the owning rank's thread only. Errors are collx::error
/// with errc::timeout, aborted, mismatch or transport; after one, the transport is failed for every
/// rank and every later call fails at once.
class transport {
 public:
  /// Virtual: communicators hold and destroy transports through std::shared_ptr<transport>.
  virtual ~transport() = default;
  /// This rank, in [0, size()).
  virtual int rank() const noexcept = 0;
  /// The world size.
  virtual int size() const noexcept = 0;
  /// Short name ("threads", "shm", "mpi").
  virtual std::string_view name() const noexcept = 0;
  /// Posts a send of `bytes` bytes at `data` to `peer`; returns at once. `data` stays readable and
  /// unchanged until wait_sends() returns. `granularity` is the element size: a transport that cuts
  /// the message into pieces cuts at multiples of it.
  virtual void post_send(int peer, const void* data, std::size_t bytes, std::size_t granularity,
                         const call_signature& sig) = 0;
  /// Blocks until the next message from `peer` arrives, checks its signature and size against the
  /// expected ones, and hands its bytes to `consume` in pieces that are multiples of `granularity`.
  virtual void recv(int peer, std::size_t bytes, std::size_t granularity, const call_signature& sig,
                    consumer_ref consume) = 0;
  /// Blocks until every posted send's buffer may be reused: the peer has consumed the message
  /// (threads; shm single-copy and window messages) or the transport holds its own copy (shm staged
  /// messages once all of them is in the ring; MPI once MPI_Isend completed). So a sender may return
  /// before its peer has received: only a receive tells that the peer reached the call.
  virtual void wait_sends() = 0;
  /// Throws the communicator's failure, if any (aborted, a peer's error).
  virtual void check() = 0;
  /// Fails the communicator for every rank with `code` and `why`, waking every waiter. Callable from
  /// any thread; idempotent (the first reason is kept).
  virtual void fail(errc code, const std::string& why) noexcept = 0;
  /// Fails the communicator for every rank as fail() does, with a failure that reached this rank on
  /// another communicator of its hierarchy: `why` already says whose it is, and the peers read it
  /// verbatim, without fail()'s "rank R failed: " (R, this transport's rank, did not fail).
  virtual void adopt_failure(errc code, const std::string& why) noexcept { fail(code, why); }
  /// Tells the transport which call this rank is in now; every collective calls it first, also one
  /// that moves nothing. A transport that can see what its peers announced (threads, shm) compares
  /// while it waits for a peer (first_disagreement): a peer's record of this call, or of an earlier
  /// one it is still in, that differs fails the call with errc::mismatch, where the ranks would
  /// otherwise wait for messages the other never sends (ranks that disagree on the root, or a rank
  /// whose count is 0). MPI keeps its records for the queries its peers send. Default: nothing.
  virtual void announce(const call_signature& sig) { (void)sig; }
  /// Tells the transport that this rank moves nothing in call `sig` (announced already) and returns
  /// at once. A transport whose peers cannot see announcements (MPI) sends them the signature, so
  /// that a peer waiting for this rank's data learns of the disagreement even if this rank makes no
  /// further call. Default: nothing.
  virtual void moves_nothing(const call_signature& sig) { (void)sig; }
  /// Sets the deadline applied to each wait from now on.
  virtual void set_timeout(std::chrono::milliseconds t) noexcept = 0;
  /// The figures algo::automatic chooses with on this transport when no selector is set
  /// (communicator_options::selector): collx::cost_model's defaults (shared memory on one NUMA
  /// node), or what the transport knows of its wiring. The same on every rank.
  virtual cost_model costs() const noexcept { return {}; }

  /// Compares this rank's current call with the records its peers publish (threads, shm:
  /// first_disagreement) and fails this transport when they differ: true then. The transports of
  /// a hierarchy run it on those they watch (at most every 50 ms), as the world's call may be one
  /// whose ranks took level calls that never meet. Default: false. MPI, whose peers publish
  /// nothing, sends its record of a hierarchical call to the peers instead (mpi_transport).
  /// Called from the waits of the transports that watch this one: all transports of a rank's
  /// hierarchy are driven by one thread at a time (the communicator's call_scope).
  virtual bool records_disagree() noexcept { return false; }
  /// records_disagree, when a level of this hierarchy has just failed with a mismatch in this
  /// transport's current call: ranks that disagree on the whole call (a root) take level calls
  /// that do not match, and a level's mismatch ("collective differs") can come before the records
  /// name the field. MPI sends this rank's record to its neighbours at once, not after
  /// query_after, and takes in the peers' notices for up to `wait`. True when this transport has
  /// failed. Default: records_disagree().
  virtual bool compare_records_now(std::chrono::milliseconds wait) noexcept {
    (void)wait;
    return records_disagree();
  }
  /// This transport's failure, if it has failed: sets `code` and `why` and returns true. Learns
  /// what it can without waiting (MPI reads the notices its peers sent). Owning thread only;
  /// never throws.
  virtual bool failure(errc& code, std::string& why) noexcept {
    (void)code, (void)why;
    return false;
  }

  /// Ends this transport's waits when `other`, another transport of the same rank, fails: the
  /// levels of a hierarchy (attach_hierarchy) watch each other, so that a rank waiting on one level
  /// learns of a failure that reached it on another (a timeout, mismatch or dead peer one level's
  /// transport found, or a notice that arrived there) instead of timing out. Held weakly. Call it
  /// before the transport is used (it is not synchronised with the waits).
  void watch(const std::shared_ptr<transport>& other) { watched_.push_back(other); }

  /// Names this transport as a level of a hierarchy (attach_hierarchy) or a group of a split:
  /// `level` ("node communicator", "cross-node communicator", "split group (color 2)") and
  /// `world_ranks[i]`, the rank of the whole
  /// communicator that its rank i is. Its own failures then read, to its peers and to the other
  /// levels, which pass them on to the whole communicator, "node communicator rank 1 (world rank
  /// 3) failed: why (node communicator: its ranks 0, 1 are world ranks 2, 3)": the ranks `why`
  /// names are the level's. Call it before the transport is used.
  void set_level(std::string level, std::vector<int> world_ranks) {
    level_ = std::move(level);
    level_world_ranks_ = std::move(world_ranks);
  }
  /// set_level's name of the level ("node communicator", ...), or empty when this transport is no level.
  const std::string& level() const noexcept { return level_; }
  /// set_level's world ranks (level_world_ranks()[i]: the world rank of this transport's rank i),
  /// or empty when this transport is no level.
  const std::vector<int>& level_world_ranks() const noexcept { return level_world_ranks_; }
  /// Rank `rank` of this transport as its messages name it (this rank's own too): "rank 1", or on
  /// a level or split group (set_level) "rank 1 (world rank 3)", so that a failure read on the
  /// whole communicator names the rank a user knows without the legend. `also`, e.g. "pid 4242",
  /// joins the parentheses (detail::rank_name).
  std::string peer_name(int rank, const std::string& also = {}) const {
    return detail::rank_name(rank, level_world_ranks_, also);
  }

  // Memory every rank maps (shm: collx::shm_buffer), for collectives that read and write peers'
  // buffers in place. The default transport has none.

  /// Whether this rank maps any shared buffer now. The same on every rank: they are made and freed
  /// collectively.
  virtual bool has_shared() const noexcept { return false; }
  /// If [p, p + bytes) lies in a shared buffer of this rank, sets `id` (the same on every rank for
  /// one buffer) and `offset` (bytes from its start) and returns true.
  virtual bool locate_shared(const void* p, std::size_t bytes, std::uint32_t& id, std::uint64_t& offset) const {
    (void)p, (void)bytes, (void)id, (void)offset;
    return false;
  }
  /// Where bytes [offset, offset + bytes) of rank r's shared buffer `id` lie in this process
  /// (readable and writable), or nullptr when there is no such buffer or the range runs past it.
  virtual std::byte* shared_address(int r, std::uint32_t id, std::uint64_t offset, std::size_t bytes) const {
    (void)r, (void)id, (void)offset, (void)bytes;
    return nullptr;
  }
  /// Tells the peers whether this rank is writing into their shared buffers now (a shared-buffer
  /// all-reduce's fold), for wait_shared_writers. A writer polls failed_now() between pieces and
  /// stops once it is true, so that it is never writing after that for long.
  virtual void shared_writes(bool writing) noexcept { (void)writing; }
  /// Whether this communicator has failed, as cheaply as a load: polled between the pieces of a
  /// shared-buffer fold. (check() throws the failure.)
  virtual bool failed_now() const noexcept { return false; }
  /// Before a shared-buffer call that failed returns: waits until no peer writes into shared
  /// buffers (shared_writes) any more, so that none writes into this rank's output after its call
  /// returned (its caller may reuse it at once). A peer that is dead, has left or is stopped is not
  /// waited for; no longer than the timeout either.
  virtual void wait_shared_writers() noexcept {}

  /// Whether split() waits for every rank without a timeout (MPI_Comm_split): collx::split then
  /// first confirms that every rank finished the exchange, so that a rank whose exchange ended
  /// well while its peers' failed (their data came before their failure notice) fails instead of
  /// waiting there for ever.
  virtual bool split_waits_for_all() const noexcept { return false; }

  /// Why calls on this transport cannot run on the communicator's progress thread (the *_async
  /// forms, communicator::submit_async), or empty when they can (the default). collx::mpi: MPI
  /// initialised below MPI_THREAD_MULTIPLE.
  virtual std::string async_refusal() const { return {}; }

  /// collx::split's step that makes the new group's transport, of this transport's kind. Every
  /// rank of this transport calls it once per split, after the ranks exchanged their colors and
  /// keys. `members`: this transport's ranks in the group, in the group's rank order (empty for a
  /// rank that joins no group: it gets null, but still takes part, as MPI_Comm_split needs);
  /// `group_rank`: this rank's index in `members`; `color` and `key` as the caller passed them;
  /// `split_id`: the same on every rank for one split and different for each split of this
  /// transport. Collective over the members (MPI: over every rank).
  /// @throws collx::error invalid_argument (the default: the transport cannot split), and what
  ///   the transport's connecting throws.
  virtual std::shared_ptr<transport> split(const std::vector<int>& members, int group_rank, int color, int key,
                                           std::uint64_t split_id) {
    (void)members, (void)group_rank, (void)color, (void)key, (void)split_id;
    COLLX_THROW(errc::invalid_argument, "collx::split: the " + std::string(name()) + " transport cannot be split");
  }
  /// A rank's split `split_id` (as split() would have had it) failed before it asked for its
  /// group, that of `color` (collx::split's exchange of colors threw on it): a transport whose
  /// groups' members would wait for that rank until their timeout fails that group (threads).
  /// Shared memory and MPI need not: their groups' starts see comm's failure themselves.
  virtual void split_failed(std::uint64_t split_id, int color, const std::string& why) noexcept {
    (void)split_id, (void)color, (void)why;
  }

 protected:
  /// This rank's own failure `why` as its peers read it: reported_by(rank, why), or for a level of
  /// a hierarchy (set_level) with the level and world ranks named.
  std::string reported_own(int rank, const std::string& why) const {
    if (level_.empty()) return reported_by(rank, why);
    return level_ + " " + peer_name(rank) + " failed: " + why + " (" + level_ + ": " + level_ranks_text(level_world_ranks_) + ")";
  }
  /// A failure `why` stored for every rank to read, as rank `rank` reads it: its own without
  /// reported_by's "rank R failed: " (as_seen_by). Not on a level of a hierarchy: failures taken
  /// over from the whole communicator number ranks there, not on the level.
  std::string as_read_by(int rank, const std::string& why) const {
    return level_.empty() ? as_seen_by(rank, why) : why;
  }

  /// For the wait loops, between polls: true when a watched transport has failed, after failing
  /// this one with its code and reason (the wait then throws this transport's failure).
  bool watched_failed() noexcept {
    // Comparing records reads every peer's: not on every poll of a wait.
    const auto now = std::chrono::steady_clock::now();
    const bool compare = now - last_records_check_ >= std::chrono::milliseconds(50);
    if (compare) last_records_check_ = now;
    for (const auto& w : watched_)
      if (const auto other = w.lock()) {
        errc code{};
        std::string why;
        if (other->failure(code, why) || (compare && other->records_disagree() && other->failure(code, why))) {
          adopt_failure(code, why);
          return true;
        }
      }
    return false;
  }

 private:
  std::string level_;                  // set_level: "" for a communicator that is no level
  std::vector<int> level_world_ranks_;
  std::vector<std::weak_ptr<transport>> watched_;
  std::chrono::steady_clock::time_point last_records_check_{};  // watched_failed's last records_disagree
};

}  // namespace v0
}  // namespace collx
