// memory_budget.cpp: see memory_budget.hpp.
#include "attn_oracle/model/memory_budget.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <thread>

namespace attn_oracle::inline model {
namespace {

std::atomic<int64_t> g_budget{0};   // 0: not set, kDefaultMemoryBudget
std::atomic<int64_t> g_threads{0};  // 0: not set, the machine's cores

std::string bytes_text(int64_t bytes) {
  std::string s = std::to_string(bytes) + " bytes";
  if (bytes >= (int64_t{1} << 20)) s += " (" + std::to_string(bytes >> 20) + " MiB)";
  return s;
}

}  // namespace

std::optional<int64_t> parse_memory_size(std::string_view text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || value <= 0) return std::nullopt;
  int shift = 0;
  if (ptr != end) {
    if (ptr + 1 != end) return std::nullopt;
    switch (*ptr) {
      case 'K': case 'k': shift = 10; break;
      case 'M': case 'm': shift = 20; break;
      case 'G': case 'g': shift = 30; break;
      default: return std::nullopt;
    }
  }
  if (value > (INT64_MAX >> shift)) return std::nullopt;
  return value << shift;
}

int64_t memory_budget() {
  if (const int64_t set = g_budget.load()) return set;
  return kDefaultMemoryBudget;
}

void set_memory_budget(int64_t bytes) { g_budget.store(bytes > 0 ? bytes : 0); }

int64_t reference_threads() {
  if (const int64_t set = g_threads.load()) return set;
  return std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, kMaxReferenceThreads);
}

void set_reference_threads(int64_t threads) { g_threads.store(std::clamp<int64_t>(threads, 0, kMaxReferenceThreads)); }

int64_t parse_reference_threads(std::string_view text) {
  int64_t threads = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), threads);
  if (ec != std::errc() || ptr != text.data() + text.size() || threads < 1) return 1;
  return std::min(threads, kMaxReferenceThreads);
}

ProcessLimits process_limits_from(const Environment& environment, ProcessLimits limits) {
  if (const auto it = environment.find("ATTN_ORACLE_MEMORY_BUDGET"); it != environment.end())
    if (const auto bytes = parse_memory_size(it->second)) limits.memory_budget = *bytes;
  if (const auto it = environment.find("ATTN_ORACLE_THREADS"); it != environment.end())
    limits.reference_threads = parse_reference_threads(it->second);
  return limits;
}

void install_process_limits(const ProcessLimits& limits) {
  set_memory_budget(limits.memory_budget);
  set_reference_threads(limits.reference_threads);
}

void MemoryNeed::add(std::string_view what, const std::vector<int64_t>& factors) {
  if (overflow_) return;  // the message names the first item that overflowed
  int64_t bytes = 1;
  for (int64_t f : factors)
    if (f < 0 || __builtin_mul_overflow(bytes, f, &bytes)) overflow_ = true;
  if (!overflow_ && __builtin_add_overflow(total_, bytes, &total_)) overflow_ = true;
  if (overflow_ || bytes > largest_bytes_) {
    largest_ = what;
    largest_bytes_ = bytes;
  }
}

std::optional<Error> MemoryNeed::check(std::string_view operation) const {
  const int64_t budget = memory_budget();
  const std::string raise = "; set ATTN_ORACLE_MEMORY_BUDGET or --memory-budget to raise the budget";
  if (overflow_)
    return Error{ErrorCode::over_memory_budget,
                 std::string(operation) + " would need more than 2^63 bytes: the size of " + largest_ +
                     " overflows int64 (memory budget " + bytes_text(budget) + ")"};
  if (total_ <= budget) return std::nullopt;
  std::string message = std::string(operation) + " would need " + bytes_text(total_) +
                        ", over the memory budget of " + bytes_text(budget);
  message += largest_bytes_ == total_ ? ", for " + largest_
                                      : "; the largest part is " + largest_ + " (" + bytes_text(largest_bytes_) + ")";
  return Error{ErrorCode::over_memory_budget, message + raise};
}

}  // namespace attn_oracle::model
