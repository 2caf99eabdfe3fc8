/// @file detail/schedule_cache.hpp
/// The schedule a communicator built last, and the algorithm its cost model chose last, kept for
/// the next call with the same parameters.
///
/// Why: a small collective's data exchange over shared memory takes a few hundred nanoseconds, and
/// building its schedule (a vector of steps, allocated) took about a quarter of the instructions of
/// a 32-byte all-reduce, the cost model's choice another 4%. Training and benchmark loops repeat one
/// call shape, so one cached entry removes that work (and every per-call allocation of the
/// schedule) from the repeated calls.
#pragma once

#include <collx/algo/automatic.hpp>
#include <collx/algo/build.hpp>
#include <collx/algo/schedule.hpp>

namespace collx {
inline namespace v0 {
namespace detail {

/// One communicator's last schedule. Not thread-safe: used inside a call (communicator::call_scope).
class schedule_cache {
 public:
  /// The parameters of the next schedule: the caller sets every field (they keep the last call's
  /// values, so that the vectors in them are reused without allocating).
  schedule::params& params() noexcept { return next_; }

  /// The steps for params() under algorithm `a`: the cached ones when the last schedule was built
  /// from equal parameters, else built now (and cached).
  const schedule::steps& steps(algorithm a, bool in_place) {
    if (!valid_ || a != alg_ || in_place != in_place_ || !(next_ == built_)) {
      valid_ = false;  // stays invalid if make_schedule throws
      steps_ = schedule::make_schedule(a, next_, in_place);
      built_ = next_;
      alg_ = a;
      in_place_ = in_place;
      valid_ = true;
    }
    return steps_;
  }

  /// choose(q), or its answer for the last q when q is the same. Only for a choice that depends on
  /// q alone (a communicator's cost model: its figures are fixed).
  template <class Choose>
  algorithm choice(const selection_query& q, Choose choose) {
    if (!choice_valid_ || !(q == chosen_for_)) {
      choice_valid_ = false;  // stays invalid if choose throws
      chosen_ = choose(q);
      chosen_for_ = q;
      choice_valid_ = true;
    }
    return chosen_;
  }

 private:
  schedule::params next_;
  schedule::params built_;
  schedule::steps steps_;
  algorithm alg_ = algorithm::direct;
  bool in_place_ = false;
  bool valid_ = false;
  selection_query chosen_for_;
  algorithm chosen_ = algorithm::direct;
  bool choice_valid_ = false;
};

}  // namespace detail
}  // namespace v0
}  // namespace collx
