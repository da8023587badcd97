// property_runner.hpp: the driver that runs one property (properties/property.hpp)
// on one backend.
//
// A run is `cases` draws. Draw k comes from a Random keyed by (seed, k) at size
// k mod (max_size + 1) spread evenly (RapidCheck's schedule), so any subset of
// the draws can run on its own: shard i of n takes the draws k = i mod n, and n
// shards together are exactly the unsharded run. A draw passes, is declined
// (the backend does not support it, or it says nothing about this property:
// counted per reason), or fails. A failure is shrunk (the first shrink that
// still fails, again and again: RapidCheck's strategy), checked twice more
// (a backend whose answer changes is reported as nondeterministic), written as
// a case file with the property record that replays it, and the run goes on
// to the end of its budget: every failing draw is kept and clustered by root
// (triage.hpp), and the max_failures highest-ranked clusters are shown in full.
// Only RapidCheck's public generator API is used (Gen, Random, Shrinkable).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "attn_oracle/properties/property.hpp"
#include "attn_oracle/runner/failure_store.hpp"
#include "attn_oracle/runner/run_outcome.hpp"
#include "attn_oracle/runner/triage.hpp"
#include "attn_oracle/seam/backend.hpp"

namespace attn_oracle::inline runner {

// The run of `property` on `backend`: the draws of settings.shard from
// resume.first_draw on, each told to `listener` (run_settings.hpp) as it goes.
PropertyOutcome run_property(const PropertyDef& property, Backend& backend, const RunSettings& settings,
                             RunListener* listener = nullptr, const ResumePoint& resume = {});

// Draw k of a run, walked down `path` (shrink indices), then checked: what a
// supervising process asks a fresh child for when it shrinks a crash.
// `before_check` sees the case first (the child writes it to a file there).
struct TrialResult {
  enum class Kind { passed, failed, declined, no_such_shrink };
  Kind kind = Kind::passed;
  std::string message;
};
// The context is built once for all the draws asked of one run (draw_context).
TrialResult run_draw(const PropertyDef& property, const DrawContext& context, const RunSettings& settings, int draw,
                     const std::vector<size_t>& path, const std::function<void(const Case&)>& before_check = {});

}  // namespace attn_oracle::runner
