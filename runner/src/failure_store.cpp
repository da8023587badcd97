// failure_store.cpp: where counterexamples live and how a run replays the
// stored ones (failure_store.hpp).
//
// store.json is the one file several processes write (the shards of a run,
// an isolated child and its supervisor): each update rereads it under an
// flock on the property directory and replaces it by a rename, so an update
// never loses another's entry and a reader never sees half a file.
#include "attn_oracle/runner/failure_store.hpp"
#include "attn_oracle/runner/triage.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>


namespace attn_oracle::inline runner {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kIndexFile = "store.json";
constexpr const char* kIndexSchema = "attn-oracle.store/1";

// FNV-1a, 64 bits: no dependency, and collisions are out of reach for the
// few hundred cases a store holds.
std::string fnv1a_hex(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

// The property directory locked for one update of its index.
class IndexLock {
 public:
  explicit IndexLock(const fs::path& dir) : fd_(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)) {
    if (fd_ >= 0) flock(fd_, LOCK_EX);
  }
  ~IndexLock() {
    if (fd_ >= 0) close(fd_);  // closing releases the lock
  }
  IndexLock(const IndexLock&) = delete;
  IndexLock& operator=(const IndexLock&) = delete;

 private:
  int fd_;
};

// hash -> passing runs in a row (0: still failing). An unreadable index is
// an empty one, said in `problem`: the case files stay and the next failure
// of each lists it again.
std::map<std::string, int> read_index(const fs::path& dir, std::string* problem = nullptr) {
  std::map<std::string, int> index;
  std::ifstream in(dir / kIndexFile);
  if (!in) return index;
  const json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("schema", "") != kIndexSchema || !j.contains("cases") || !j["cases"].is_object()) {
    if (problem) *problem = "cannot read " + (dir / kIndexFile).string() + " (not an " + kIndexSchema + " file): its cases are not replayed";
    return index;
  }
  for (auto it = j["cases"].begin(); it != j["cases"].end(); ++it)
    index[it.key()] = it.value().is_object() ? it.value().value("passing_runs", 0) : 0;
  return index;
}

void write_index(const fs::path& dir, const std::map<std::string, int>& index) {
  json cases = json::object();
  for (const auto& [hash, passing] : index) cases[hash] = {{"passing_runs", passing}};
  const fs::path tmp = dir / (std::string(kIndexFile) + "." + std::to_string(getpid()) + ".tmp");
  std::ofstream(tmp) << json{{"schema", kIndexSchema}, {"cases", cases}}.dump(2) << "\n";
  std::error_code ec;
  fs::rename(tmp, dir / kIndexFile, ec);
}

// Rereads the index under the lock, applies `change`, writes it back.
template <class Change>
void update_index(const fs::path& dir, Change change) {
  IndexLock lock(dir);
  std::map<std::string, int> index = read_index(dir);
  change(index);
  write_index(dir, index);
}


// A stored case that still fails, as a failure of this run.
PropertyFailure stored_failure(const PropertyDef& property, Backend& backend, const RunSettings& s, Case c,
                               const std::string& path, const std::string& message) {
  PropertyFailure f;
  f.message = message;
  f.signature = failure_group(message, &c);  // triage.hpp: what the draws are matched by
  f.counterexample = std::move(c);
  f.from_store = true;
  f.case_path = path;
  set_replay_commands(f, s, backend.name(), property.id, false);
  return f;
}

// One stored case checked: true when it still fails (then it joins `out`).
bool replay_one(const PropertyDef& property, Backend& backend, const RunSettings& s, ResumePoint& resume,
                RunListener& listener, const Case& c, const fs::path& path, PropertyOutcome& out) {
  listener.before_stored_case(path.string());
  const Judgement j = check_property(property, backend, c);
  if (j.status != Judgement::Status::fail) return false;
  const std::string prefix = property.id + ": ";
  std::string message = j.lines.empty() ? "failed" : j.lines.front();
  if (message.rfind(prefix, 0) == 0) message.erase(0, prefix.size());
  PropertyFailure f = stored_failure(property, backend, s, c, path.string(), message);
  resume.known_signatures.insert(f.signature);
  listener.failure_found(f);
  out.failures.push_back(std::move(f));
  return true;
}

}  // namespace

std::string counterexample_origin(const PropertyFailure& f) {
  if (f.from_store) return "from the store";
  return "draw " + std::to_string(f.draw) + ", " + std::to_string(f.shrinks) + " shrinks";
}

std::string case_hash(const Case& c) {
  json j = case_to_json(c);
  for (const char* run_specific : {"schema", "note", "expected"}) j.erase(run_specific);
  if (j.contains("property")) j["property"] = {{"id", c.property->id}, {"drawn", c.property->drawn}};
  return fnv1a_hex(j.dump());  // nlohmann::json keeps keys sorted: one text per case
}

std::string property_store_dir(const std::string& dir, const BackendIdentity& who, const std::string& property) {
  return (fs::path(dir) / (backend_dir_name(who.name) + "@" + backend_dir_name(who.version)) / property).string();
}

std::string keep_counterexample(const Case& c, const BackendIdentity& who, const std::string& property,
                                const RunSettings& s) {
  const fs::path dir = property_store_dir(s.failures_dir, who, property);
  const std::string hash = case_hash(c);
  const fs::path path = dir / (hash + ".case.json");
  // Written beside its final name and renamed: a reader never sees half a file.
  const fs::path tmp = dir / (hash + "." + std::to_string(getpid()) + ".tmp");
  if (!write_case_file(tmp.string(), c)) return "";
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return "";
  if (s.use_store) update_index(dir, [&](std::map<std::string, int>& index) { index[hash] = 0; });
  return fs::absolute(path).string();
}

void replay_stored_failures(const PropertyDef& property, Backend& backend, const RunSettings& s, ResumePoint& resume,
                            RunListener& listener, PropertyOutcome& out) {
  if (!s.use_store || !resume.replay_store || resume.first_draw > 0 || s.shard.index != 0) return;
  const fs::path dir = property_store_dir(s.failures_dir, backend.identity(), property.id);
  std::string problem;
  const std::map<std::string, int> index = read_index(dir, &problem);
  StoreReplay& r = out.store;
  if (!problem.empty()) ++r.unreadable, r.notes.push_back(problem);
  std::map<std::string, int> passing;  // hash -> passing runs after this one
  for (const auto& [hash, before] : index) {
    const fs::path path = fs::absolute(dir / (hash + ".case.json"));
    if (!fs::exists(path)) {  // deleted by hand: the store forgets it
      passing[hash] = kRetirePassingRuns;
      r.notes.push_back("forgot the stored case " + path.string() + ": the file is gone");
      continue;
    }
    const Expected<Case> c = read_case_file(path.string());
    if (!c) {
      ++r.unreadable;
      r.notes.push_back("cannot read the stored case " + path.string() + ": " + std::string(to_string(c.error().code)) +
                        ": " + c.error().message + " (skipped; delete it or promote it by hand)");
      continue;
    }
    ++r.replayed;
    if (replay_one(property, backend, s, resume, listener, c.value(), path, out)) {
      ++r.still_failing, passing[hash] = 0;
      continue;
    }
    ++r.now_passing, passing[hash] = before + 1;
    if (before + 1 < kRetirePassingRuns) continue;
    ++r.retired;
    r.notes.push_back("retired " + path.string() + ": it passed " + std::to_string(kRetirePassingRuns) + " runs in a row");
  }
  if (!passing.empty())
    update_index(dir, [&](std::map<std::string, int>& now) {
      for (const auto& [hash, runs] : passing) {
        if (runs < kRetirePassingRuns) {
          now[hash] = runs;
          continue;
        }
        now.erase(hash);
        std::error_code ec;
        fs::remove(dir / (hash + ".case.json"), ec);
      }
    });
  listener.store_replayed(r);
}

std::vector<std::string> orphaned_store_notes(const std::string& dir, const BackendIdentity& who) {
  std::vector<std::string> notes;
  const fs::path root = fs::path(property_store_dir(dir, who, "x")).parent_path();
  std::error_code ec;
  for (const auto& area : fs::directory_iterator(root, ec))  // metadata/, attention/, ...
    for (const auto& entry : fs::directory_iterator(area.path(), ec)) {
      const std::string id = area.path().filename().string() + "/" + entry.path().filename().string();
      if (!entry.is_directory() || find_property(id)) continue;
      const size_t stored = read_index(entry.path()).size();
      if (stored > 0)
        notes.push_back("the failure store holds " + std::to_string(stored) + " " + stored_case_word(stored) + " of " + id +
                        ", a property this build does not have (not replayed): " + entry.path().string());
    }
  return notes;
}

}  // namespace attn_oracle::runner
