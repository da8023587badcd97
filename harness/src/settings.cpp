// settings.cpp: the environment resolved into Settings (settings.hpp).
#include "attn_oracle/harness/settings.hpp"

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <sstream>

namespace attn_oracle::inline harness {
namespace {

// "max_success=200 seed=7": RapidCheck's RC_PARAMS syntax; other keys are RapidCheck's own.
std::optional<uint64_t> rc_param(const std::string& params, const std::string& name) {
  std::istringstream words(params);
  for (std::string word; words >> word;)
    if (word.rfind(name + "=", 0) == 0) try {
        return std::stoull(word.substr(name.size() + 1));
      } catch (const std::exception&) {
        return std::nullopt;
      }
  return std::nullopt;
}

const std::string* find(const Environment& environment, std::string_view name) {
  const auto it = environment.find(name);
  return it == environment.end() ? nullptr : &it->second;
}

// A positive number of seconds, or nullopt.
std::optional<double> seconds(const std::string* text) {
  const double value = text ? std::strtod(text->c_str(), nullptr) : 0.0;
  return value > 0 ? std::optional(value) : std::nullopt;
}

// RC_PARAMS, the failures directory and the store, the draws' profile and menu.
void resolve_run(const Environment& environment, Settings& s) {
  RunSettings& run = s.run;
  s.rc_params = environment_value(environment, "RC_PARAMS");
  if (auto n = rc_param(s.rc_params, "max_success")) run.cases = static_cast<int>(*n);
  if (auto n = rc_param(s.rc_params, "max_size")) run.max_size = static_cast<int>(std::min<uint64_t>(*n, 100));
  if (auto n = rc_param(s.rc_params, "seed")) run.seed = *n;
  run.failures_dir = environment_value(environment, "ATTN_ORACLE_FAILURES_DIR", run.failures_dir);
  // "off" (or empty), "on" (in the failures directory), or the store's own directory.
  if (const std::string* store = find(environment, "ATTN_ORACLE_STORE")) {
    s.store = *store;
    run.use_store = !store->empty() && *store != "off" && *store != "0";
    if (run.use_store && *store != "on" && *store != "1") run.failures_dir = *store;
  }
  if (const std::string* profile = find(environment, "ATTN_ORACLE_PROFILE"))
    run.draws.profile = size_profile_from(*profile).value_or(SizeProfile::ci);
  if (const std::string* menu = find(environment, "ATTN_ORACLE_SHAPE_STABLE"))
    run.draws.shape_stable = !menu->empty() && *menu != "0" && *menu != "off";
}

}  // namespace

Settings resolve_settings(const Environment& environment, Settings s) {
  resolve_run(environment, s);
  s.skips_file = environment_value(environment, "ATTN_ORACLE_SKIPS", s.skips_file);
  s.xfails_file = environment_value(environment, "ATTN_ORACLE_XFAILS", s.xfails_file);
  s.coverage_file = environment_value(environment, "ATTN_ORACLE_COVERAGE", s.coverage_file);
  s.results_dir = environment_value(environment, "ATTN_ORACLE_RESULTS_DIR", s.results_dir);
  if (const std::string* isolate = find(environment, "ATTN_ORACLE_ISOLATE"); isolate && *isolate == "0") s.isolate = false;
  s.case_timeout_seconds = seconds(find(environment, "ATTN_ORACLE_CASE_TIMEOUT")).value_or(s.case_timeout_seconds);
  s.worker_timeout_seconds = seconds(find(environment, "ATTN_ORACLE_WORKER_TIMEOUT")).value_or(s.worker_timeout_seconds);
  s.limits = process_limits_from(environment, s.limits);
  s.arch = environment_value(environment, "ATTN_ORACLE_ARCH", s.arch);
  if (const std::string* visible = find(environment, "CUDA_VISIBLE_DEVICES")) s.visible_devices = *visible;
  return s;
}

std::optional<Shard> gtest_shard(const Environment& environment) {
  const std::string* total = find(environment, "GTEST_TOTAL_SHARDS");
  const std::string* index = find(environment, "GTEST_SHARD_INDEX");
  if (!total || !index) return std::nullopt;
  int i = 0, n = 0;
  const auto parsed = [](const std::string& text, int& out) {
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && end == text.data() + text.size();
  };
  if (!parsed(*index, i) || !parsed(*total, n) || n < 1 || i < 0 || i >= n) return std::nullopt;
  return Shard{i, n};
}

void install_process_settings(const Settings& settings) {
  install_process_limits(settings.limits);
  set_worker_timeout_seconds(settings.worker_timeout_seconds);
}

RunSettings default_run_settings() { return resolve_settings(read_environment()).run; }

}  // namespace attn_oracle::harness
