// run_settings.cpp: see run_settings.hpp.
#include "attn_oracle/runner/run_settings.hpp"

#include <algorithm>
#include <charconv>
#include <stdexcept>

namespace attn_oracle::inline runner {
namespace {

std::optional<int> whole_number(std::string_view text) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

std::string to_string(Shard shard) { return std::to_string(shard.index + 1) + "/" + std::to_string(shard.count); }

std::optional<Shard> parse_shard(std::string_view text) {
  const size_t slash = text.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  const auto i = whole_number(text.substr(0, slash)), n = whole_number(text.substr(slash + 1));
  if (!i || !n || *n < 1 || *i < 1 || *i > *n) return std::nullopt;
  return Shard{*i - 1, *n};
}

int draws_in_shard(int cases, Shard shard) {
  const int count = std::max(1, shard.count);
  return std::max(0, (cases - shard.index + count - 1) / count);
}

nlohmann::ordered_json to_json(const RunSettings& s) {
  return {{"cases", s.cases},
          {"max_size", s.max_size},
          {"seed", s.seed},
          {"shard", to_string(s.shard)},
          {"max_failures", s.max_failures},
          {"profile", to_string(s.draws.profile)},
          {"shape_stable", s.draws.shape_stable},
          {"failures_dir", s.failures_dir},
          {"store", s.use_store},
          {"program", s.program},
          {"draw_log", s.draw_log}};
}

RunSettings run_settings_from_json(const nlohmann::json& j) {
  RunSettings s;
  s.cases = j.value("cases", s.cases);
  s.max_size = j.value("max_size", s.max_size);
  s.seed = j.value("seed", s.seed);
  if (j.contains("shard")) {
    const auto shard = parse_shard(j.at("shard").get<std::string>());
    if (!shard) throw std::invalid_argument("run settings: shard " + j.at("shard").dump() + " is not I/N");
    s.shard = *shard;
  }
  s.max_failures = j.value("max_failures", s.max_failures);
  if (j.contains("profile")) {
    const auto profile = size_profile_from(j.at("profile").get<std::string>());
    if (!profile) throw std::invalid_argument("run settings: profile " + j.at("profile").dump() + " is not ci or deep");
    s.draws.profile = *profile;
  }
  s.draws.shape_stable = j.value("shape_stable", s.draws.shape_stable);
  s.failures_dir = j.value("failures_dir", s.failures_dir);
  s.use_store = j.value("store", s.use_store);
  s.program = j.value("program", s.program);
  s.draw_log = j.value("draw_log", s.draw_log);
  return s;
}

nlohmann::ordered_json to_json(const ResumePoint& r) {
  return {{"first_draw", r.first_draw}, {"known_signatures", r.known_signatures}, {"replay_store", r.replay_store}};
}

ResumePoint resume_point_from_json(const nlohmann::json& j) {
  ResumePoint r;
  r.first_draw = j.value("first_draw", r.first_draw);
  r.known_signatures = j.value("known_signatures", r.known_signatures);
  r.replay_store = j.value("replay_store", r.replay_store);
  return r;
}

}  // namespace attn_oracle::runner
