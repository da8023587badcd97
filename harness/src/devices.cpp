// devices.cpp: see devices.hpp.
#include "attn_oracle/harness/devices.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include "attn_oracle/harness/ci_output.hpp"
#include "attn_oracle/harness/coverage_targets.hpp"
#include "attn_oracle/harness/report.hpp"

extern char** environ;

namespace attn_oracle::inline harness {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string part; std::getline(in, part, sep);) out.push_back(part);
  if (!text.empty() && text.back() == sep) out.emplace_back();
  return out;
}

bool is_index(const std::string& s) {
  return !s.empty() && s.size() < 6 && s.find_first_not_of("0123456789") == std::string::npos;
}

// One device as a CUDA_VISIBLE_DEVICES entry: through the outer list when there is one.
Expected<std::string> visible(const std::string& device, const std::vector<std::string>& outer, const char* raw) {
  if (outer.empty()) return device;
  if (!is_index(device) || std::stoul(device) >= outer.size())
    return Error{ErrorCode::bad_case, "device " + device + ": CUDA_VISIBLE_DEVICES=" + raw + " makes " +
                                          std::to_string(outer.size()) + " devices visible, indices 0 to " +
                                          std::to_string(outer.size() - 1)};
  return outer[std::stoul(device)];
}

// The arguments of `check` for child i of n: --devices, --report, --junit-xml and
// --github-annotations left to the parent, --report and --shard its own.
std::vector<std::string> child_arguments(const std::vector<std::string>& args, const std::string& report, int i, int n) {
  static const std::set<std::string> with_value = {"--devices", "--report", "--junit-xml", "--require-coverage"};
  std::vector<std::string> out = {"check"};
  for (size_t k = 0; k < args.size(); ++k) {
    const std::string& a = args[k];
    const std::string flag = a.substr(0, a.find('='));
    if (with_value.count(flag)) {
      if (flag == a) ++k;  // its value is the next argument
      continue;
    }
    if (a != "--github-annotations") out.push_back(a);
  }
  for (const std::string& a : {std::string("--report"), report, std::string("--shard"),
                               std::to_string(i + 1) + "/" + std::to_string(n)})
    out.push_back(a);
  return out;
}

// Starts this program with `args`, CUDA_VISIBLE_DEVICES=`visible` and its output
// (stdout and stderr) into `log`; the child's pid, or -1.
pid_t spawn_child(const std::vector<std::string>& args, const std::string& visible, const std::string& log) {
  std::vector<std::string> env_strings = {"CUDA_VISIBLE_DEVICES=" + visible};
  for (char** e = environ; *e; ++e)
    if (!std::string(*e).starts_with("CUDA_VISIBLE_DEVICES=")) env_strings.emplace_back(*e);
  std::vector<char*> envp, argv;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::string self = fs::read_symlink("/proc/self/exe").string();
  std::vector<std::string> words = args;
  argv.push_back(self.data());
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = -1;
  if (posix_spawn(&pid, self.c_str(), &actions, nullptr, argv.data(), envp.data()) != 0) pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  return pid;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string exit_text(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

}  // namespace

Expected<std::vector<std::string>> device_assignment(const std::string& devices, const char* outer_visible) {
  const std::string raw = outer_visible ? outer_visible : "";
  const std::vector<std::string> outer = raw.empty() ? std::vector<std::string>{} : split(raw, ',');
  std::vector<std::string> out;
  std::set<std::string> seen;
  for (const std::string& device : split(devices, ',')) {
    if (device.empty()) return Error{ErrorCode::bad_case, "--devices " + devices + ": an empty entry"};
    const Expected<std::string> v = visible(device, outer, raw.c_str());
    if (!v) return Error{ErrorCode::bad_case, "--devices " + devices + ": " + v.error().message};
    if (!seen.insert(v.value()).second)
      return Error{ErrorCode::bad_case, "--devices " + devices + ": device " + device + " is listed twice"};
    out.push_back(v.value());
  }
  if (out.empty()) return Error{ErrorCode::bad_case, "--devices needs at least one device"};
  return out;
}

Expected<std::optional<std::string>> ctest_gpu_allocation(const Environment& environment) {
  const std::string count = environment_value(environment, "CTEST_RESOURCE_GROUP_COUNT");
  if (count.empty()) return std::optional<std::string>();
  const std::string outer = environment_value(environment, "CUDA_VISIBLE_DEVICES");
  const std::vector<std::string> outer_list = outer.empty() ? std::vector<std::string>{} : split(outer, ',');
  std::string ids;
  for (int g = 0; g < std::atoi(count.c_str()); ++g) {
    const std::string name = "CTEST_RESOURCE_GROUP_" + std::to_string(g) + "_GPUS";
    const std::string value = environment_value(environment, name);
    if (value.empty()) continue;  // a group of another resource type
    for (const std::string& item : split(value, ';'))
      for (const std::string& field : split(item, ','))
        if (field.starts_with("id:")) {
          const Expected<std::string> v = visible(field.substr(3), outer_list, outer.c_str());
          if (!v) return Error{ErrorCode::bad_case, name + "=" + value + ": " + v.error().message};
          ids += (ids.empty() ? "" : ",") + v.value();
        }
  }
  if (ids.empty()) return std::optional<std::string>();
  return std::optional<std::string>(ids);
}

int run_check_on_devices(const CheckOptions& options, const CheckEnvironment& env) {
  const std::optional<std::string>& outer = env.settings.visible_devices;
  const Expected<std::vector<std::string>> devices = device_assignment(options.devices, outer ? outer->c_str() : nullptr);
  if (!devices) return std::cerr << "attn-oracle check: " << devices.error().message << "\n", 1;
  if (options.shard) return std::cerr << "attn-oracle check: --devices shards the draws itself: give it or --shard\n", 1;
  const fs::path dir = options.report_dir.empty() ? fs::path("report") : fs::path(options.report_dir);
  const int n = static_cast<int>(devices->size());
  std::vector<pid_t> children;
  std::cout << "attn-oracle check on " << n << " devices:";
  for (int i = 0; i < n; ++i) {
    const fs::path part = dir / ("device-" + std::to_string(i));
    fs::create_directories(part);
    children.push_back(spawn_child(child_arguments(options.arguments, part.string(), i, n), (*devices)[i],
                                   (part / "output.txt").string()));
    std::cout << " " << i << " (CUDA_VISIBLE_DEVICES=" << (*devices)[i] << ")";
  }
  std::cout << "\n" << std::flush;
  std::vector<CheckReport> shards;
  bool interrupted = false, broken = false;
  for (int i = 0; i < n; ++i) {
    int status = 0;
    const fs::path part = dir / ("device-" + std::to_string(i));
    if (children[i] < 0 || waitpid(children[i], &status, 0) < 0) status = -1;
    const std::string done = children[i] < 0 ? "could not start" : exit_text(status);
    std::cout << "\n---- device " << i << " (CUDA_VISIBLE_DEVICES=" << (*devices)[i] << "): " << done << "\n"
              << slurp(part / "output.txt");
    interrupted = interrupted || (WIFEXITED(status) && WEXITSTATUS(status) == 130);
    const nlohmann::json j = nlohmann::json::parse(slurp(part / "conformance.json"), nullptr, false);
    const Expected<CheckReport> r = j.is_discarded() ? Expected<CheckReport>(Error{ErrorCode::bad_case, "no report"})
                                                     : report_from_json(j);
    if (r) shards.push_back(r.value());
    else broken = true, std::cout << "device " << i << " wrote no report (" << done << ")\n";
  }
  if (shards.empty()) return 1;
  Expected<CheckReport> merged = merge_reports(shards);
  if (!merged) return std::cerr << "attn-oracle check: " << merged.error().message << "\n", 1;
  std::string error;
  if (!options.coverage_file.empty()) {  // on the merged counts: a shard's alone would miss its targets
    const std::optional<CoverageTargets> targets = CoverageTargets::read(options.coverage_file, error);
    if (!targets) return std::cerr << "attn-oracle check: " << error << "\n", 1;
    for (CheckResult& r : merged.value().results) {
      targets->apply(r);
      if (!targets->unmet(r).empty()) std::cout << "  " << r.id() << ": " << r.note << "\n";
    }
  }
  if (!write_report_files(merged.value(), dir.string(), error)) std::cerr << "attn-oracle check: " << error << "\n";
  const CheckReport& r = merged.value();
  std::cout << "\nall devices: " << r.count(Verdict::passed) << " passed, " << r.count(Verdict::failed) << " failed, "
            << r.count(Verdict::skipped) << " skipped, " << r.count(Verdict::xfail) << " expected failures, "
            << r.count(Verdict::xpass) << " unexpected passes\nreport: " << dir.string() << "/conformance.md, "
            << dir.string() << "/conformance.json\n";
  write_ci_output(r, options, error);
  if (interrupted) return 130;
  return r.failures() == 0 && error.empty() && !broken ? 0 : 1;
}

}  // namespace attn_oracle::harness
