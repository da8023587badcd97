// draw_log.hpp: every search draw of a run as one JSON line, in Hypothesis's
// observability format (a "test_case" observation; its Tyche viewer and other
// tools read it): what was drawn, and whether it was judged (passed, failed) or
// declined ("gave_up", with the reason). `check --log-draws FILE` appends a line
// per draw (RunSettings::draw_log), from every process of the run (isolated
// children, --devices children) with one write each, so lines never interleave.
//
// Fields (docs/ci.md#what-was-drawn-check---log-draws-file):
//   type "test_case"; property "BACKEND/PROPERTY"; run_start (unix seconds);
//   status passed | failed | gave_up; status_reason (the failure's message or the
//   decline's reason; "" when passed); representation (the case in one to three
//   lines, repro.hpp's case_summary); arguments {"case": the case file's JSON,
//   "draw": k}; how_generated "generated (draw k of N, seed S, size Z)";
//   features (the draw's classes: "mask causal", "layout GQA", "dtype bf16 fwd"
//   mapped to true); coverage null; timing {"execute:test", "execute:backend"}
//   in seconds; metadata {backend, backend_version, seed, shard}.
//
// Tested by tests/draw_log_test.cpp and python/tests/test_cli.py.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "attn_oracle/cases/case.hpp"
#include "attn_oracle/runner/run_settings.hpp"

namespace attn_oracle::inline runner {

struct DrawObservation {
  std::string property, backend, backend_version;
  uint64_t seed = 0;
  int draw = 0, cases = 0, size = 0;
  Shard shard;
  double run_start = 0.0;
  std::string status;  // passed, failed, gave_up
  std::string reason;
  const Case* drawn = nullptr;  // null when the draw held no case (the generator gave up)
  double seconds = 0.0, backend_seconds = 0.0;
};

nlohmann::ordered_json observation_json(const DrawObservation& o);
// Appends `line` and a newline to `path` in one write (O_APPEND); false when it cannot.
bool append_json_line(const std::string& path, const nlohmann::ordered_json& line);

}  // namespace attn_oracle::runner
