// memory_budget.hpp: how much memory one evaluation may ask for.
//
// The reference is O(T^2) on purpose, so a large but well-formed input (a long
// row, a huge max_segments or head_dim) would otherwise end in std::bad_alloc or
// the OOM killer. Every entry point that allocates in proportion to its input
// first adds up what it needs here and answers over_memory_budget, naming the
// need and the budget, when that is more than the budget or overflows int64.
//
// The budget is process-wide: kDefaultMemoryBudget unless the program's edge
// installs another (install_process_limits, from ATTN_ORACLE_MEMORY_BUDGET:
// bytes, or with a K, M or G suffix; `attn-oracle eval --memory-budget`).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "attn_oracle/model/error.hpp"
#include "attn_oracle/model/environment.hpp"

namespace attn_oracle::inline model {

inline constexpr int64_t kDefaultMemoryBudget = int64_t{4} << 30;  // 4 GiB

int64_t memory_budget();
void set_memory_budget(int64_t bytes);
// "4096", "64K", "512M", "4G" -> bytes; nullopt when malformed or not positive.
std::optional<int64_t> parse_memory_size(std::string_view text);

// Worker threads of the float64 references (reference/attention.hpp), here
// because each worker's scratch is charged to the budget: the machine's cores
// (std::thread::hardware_concurrency, at most kMaxReferenceThreads) unless
// set_reference_threads says otherwise (<= 0: back to the cores).
inline constexpr int64_t kMaxReferenceThreads = 256;
int64_t reference_threads();
void set_reference_threads(int64_t threads);
// ATTN_ORACLE_THREADS as written: a positive integer, at most
// kMaxReferenceThreads; anything else reads as 1.
int64_t parse_reference_threads(std::string_view text);

// The process-wide limits as a program's edge resolves them from the
// environment it read (environment.hpp): ATTN_ORACLE_MEMORY_BUDGET (a malformed
// one leaves the default) and ATTN_ORACLE_THREADS. They stay process-wide, not
// passed with each call: every evaluation in the process is bounded by them,
// the Python module's and a backend's own calls of the reference too.
struct ProcessLimits {
  int64_t memory_budget = kDefaultMemoryBudget;
  int64_t reference_threads = 0;  // 0: the machine's cores
};
ProcessLimits process_limits_from(const Environment& environment, ProcessLimits defaults = {});
// set_memory_budget and set_reference_threads, once, at the program's edge.
void install_process_limits(const ProcessLimits& limits);

// Adds up named byte counts, each a product of factors, and checks the total.
//   MemoryNeed need;
//   need.add("explicit mask of one row", {q_len, kv_len});
//   need.add("q, k, v", {3, elems, sizeof(double)});
//   if (auto e = need.check("metadata")) return *e;
class MemoryNeed {
 public:
  // A negative factor counts as an overflow (callers pass -1 for "n + 1 overflowed").
  void add(std::string_view what, const std::vector<int64_t>& factors);
  // over_memory_budget for `operation` when the total overflows or is over budget.
  std::optional<Error> check(std::string_view operation) const;
  std::optional<int64_t> total() const { return overflow_ ? std::nullopt : std::optional(total_); }

 private:
  int64_t total_ = 0;
  bool overflow_ = false;
  std::string largest_;  // the biggest item, for the message
  int64_t largest_bytes_ = 0;
};

}  // namespace attn_oracle::model
