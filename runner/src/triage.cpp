// triage.cpp: clustering a property's failing draws by root (triage.hpp).
#include "attn_oracle/runner/triage.hpp"

#include <algorithm>
#include <regex>

#include "attn_oracle/properties/batch_transforms.hpp"

#include <set>
#include "attn_oracle/model/validate.hpp"

namespace attn_oracle::inline runner {
namespace {

bool starts_with(const std::string& s, std::string_view prefix) { return s.rfind(prefix, 0) == 0; }

// Values folded: numbers become '#', a bracketed list of them one "[#...]", so
// that one exception raised on many inputs is one cluster.
std::string folded(const std::string& message) {
  static const std::regex number("-?[0-9]+(\\.[0-9]+)?(e[-+]?[0-9]+)?");
  static const std::regex list("[\\[(]#(, *#)*,? *[\\])]");
  std::string out = std::regex_replace(message, number, "#");
  out = std::regex_replace(out, list, "[#...]");
  return out.substr(0, 160);
}

// "SIGSEGV", "a hang", or the message folded: how a crash ended.
std::string crash_how(const std::string& message) {
  static const std::regex signal("SIG[A-Z]+");
  std::smatch m;
  if (std::regex_search(message, m, signal)) return m.str();
  if (message.find("no answer within") != std::string::npos || message.find("answered nothing") != std::string::npos)
    return "a hang";
  if (message.find("broke the protocol") != std::string::npos) return "a protocol error";
  return folded(message);
}

// The earlier of two draws, where -1 is none (a cluster opened by a stored failure).
int earliest(int a, int b) { return a < 0 ? b : b < 0 ? a : std::min(a, b); }

std::string classes_text(const std::vector<InputClass>& classes) {
  std::string out;
  for (InputClass c : classes) out += (out.empty() ? "" : ", ") + std::string(to_string(c));
  return out;
}

// The cluster key and rank of a failure of `kind` whose case is in `classes`.
std::pair<std::string, FailureRank> root_of(FailureKind kind, const std::vector<InputClass>& classes,
                                            const std::string& message) {
  switch (kind) {
    case FailureKind::crash: return {"crash: " + crash_how(message), FailureRank::crash};
    case FailureKind::exception: return {"exception: " + folded(message), FailureRank::exception};
    case FailureKind::wrong_answer: break;
  }
  if (!classes.empty())
    return {"input class: " + std::string(to_string(classes.front())), FailureRank::wrong_on_input_class};
  return {"wrong answer: " + failure_signature(message), FailureRank::wrong_on_ordinary_input};
}

const PackedBatch* batch_of(const Case& c) {
  if (const auto* m = c.as<MetadataCase>()) return &m->batch;
  if (const AttentionCase* a = attention_fields(c.payload)) return &a->problem.batch;
  return nullptr;
}

// The condition, in Python, on the hook's argument `arg` ("batch" or "problem.batch").
std::string python_condition(InputClass c, const std::string& b) {
  switch (c) {
    case InputClass::empty_side:
      return "any(not (ids != 0).any(-1).all() for ids in (" + b + ".q_segment_ids, " + b + ".kv_segment_ids))";
    case InputClass::extra_dims: return b + ".q_segment_ids.ndim > 2 or " + b + ".kv_segment_ids.ndim > 2";
    case InputClass::int_limits:
      return "max([int(abs(a).max(initial=0)) for a in (" + b + ".q_segment_pos, " + b + ".kv_segment_pos)] + [" + b +
             ".max_segments, *" + b + ".window]) > 2**31 - 1";
  }
  return "False";
}

// The broadcast slices stacked as rows of one [slices x B, T] batch: what a
// vmapped batch is, written as a plain one.
PackedBatch extra_dims_as_rows(const PackedBatch& batch, const BatchLayout& layout) {
  PackedBatch out = batch;
  const int64_t slices = shape_product(layout.extra);
  for (auto [to, len] : {std::pair{&out.q, layout.q_len}, std::pair{&out.kv, layout.kv_len}}) {
    to->segment_ids = IntArray({slices * layout.batch, len}, {});
    to->segment_pos = IntArray({slices * layout.batch, len}, {});
  }
  for (int64_t e = 0; e < slices; ++e) {
    const PackedBatch slice = extra_slice(batch, layout, e);
    for (auto [from, to] : {std::pair{&slice.q, &out.q}, std::pair{&slice.kv, &out.kv}}) {
      to->segment_ids.data.insert(to->segment_ids.data.end(), from->segment_ids.data.begin(), from->segment_ids.data.end());
      to->segment_pos.data.insert(to->segment_pos.data.end(), from->segment_pos.data.begin(), from->segment_pos.data.end());
    }
  }
  return out;
}

}  // namespace

FailureKind failure_kind(const std::string& m) {
  if (starts_with(m, "the backend crashed or hung") || m.find("the worker ended") != std::string::npos ||
      m.find("answered nothing to") != std::string::npos || m.find("broke the protocol") != std::string::npos)
    return FailureKind::crash;
  if (starts_with(m, "exception: ") || starts_with(m, "an exception that is not") ||
      m.find("the worker's backend raised ") != std::string::npos || m.find("rejected a valid input") != std::string::npos)
    return FailureKind::exception;
  return FailureKind::wrong_answer;
}

std::string_view to_string(FailureRank rank) {
  switch (rank) {
    case FailureRank::wrong_on_ordinary_input: return "wrong answer on ordinary inputs";
    case FailureRank::wrong_on_input_class: return "wrong answer on an input class";
    case FailureRank::exception: return "exception or rejection";
    case FailureRank::crash: return "crash or hang";
  }
  return "?";
}

std::vector<InputClass> input_classes_of(const Case& c) {
  const PackedBatch* b = batch_of(c);
  return b ? input_classes(*b) : std::vector<InputClass>{};
}

std::string cluster_line(const FailureCluster& c) {
  std::string what(to_string(c.rank));
  if (c.input_class && c.rank == FailureRank::wrong_on_input_class) what += " (" + std::string(to_string(*c.input_class)) + ")";
  else if (c.input_class) what += " on " + std::string(to_string(*c.input_class));
  if (c.draws == 0 || c.first_draw < 0) return what + ", from the store";
  return what + ", " + std::to_string(c.draws) + (c.draws == 1 ? " draw" : " draws") + " from draw " +
         std::to_string(c.first_draw) + (c.stored ? ", and from the store" : "");
}

std::string decline_line(const std::string& backend, Capability capability, InputClass c) {
  const bool batch_hook = capability == Capability::metadata;
  const bool problem_hook = capability == Capability::attention || capability == Capability::attention_buffers ||
                            capability == Capability::small_seq;
  if (!batch_hook && !problem_hook) return "";
  const std::string reason = "\"" + std::string(to_string(c)) + "\"";
  const std::string cap(to_string(capability == Capability::attention_buffers ? Capability::attention : capability));
  if (!backend.starts_with(kProcessBackendPrefix)) {
    const std::string hook = batch_hook ? "MetadataCapability::unsupported(const PackedBatch& batch)"
                             : capability == Capability::small_seq
                                 ? "SmallSeqCapability::unsupported(const AttentionProblem& problem)"
                                 : "AttentionCapability::unsupported(const AttentionProblem& problem)";
    return "decline in " + hook + ": if (in_input_class(" + (batch_hook ? "batch" : "problem.batch") +
           ", InputClass::" + std::string(enumerator_name(c)) + ")) return " + reason + ";" +
           (c == InputClass::extra_dims ? " (or declare it: InputDomain::extra_dims = false)" : "");
  }
  if (backend.find("attn_oracle.worker") != std::string::npos) {
    const std::string arg = batch_hook ? "batch" : "problem";
    return "decline in def unsupported_" + cap + "(self, " + arg + "): if " +
           python_condition(c, batch_hook ? "batch" : "problem.batch") + ": return " + reason +
           (c == InputClass::extra_dims ? "  (or declare it: domain = Domain(extra_dims=False))" : "");
  }
  return "decline: answer the worker's \"unsupported\" request for " + cap + " with {\"unsupported\": " + reason +
         "} when the batch has " + std::string(to_string(c)) + " (docs/protocol.md)";
}

std::vector<Case> out_of_input_classes(const Case& c) {
  const auto* m = c.as<MetadataCase>();
  if (!m) return {};
  const Expected<BatchLayout> layout = validate_shapes(m->batch);
  if (!layout) return {};
  std::vector<Case> out;
  const auto with_batch = [&](PackedBatch b) {
    Case lifted = c;
    lifted.payload = MetadataCase{std::move(b)};
    out.push_back(std::move(lifted));
  };
  if (in_input_class(m->batch, InputClass::extra_dims)) {
    with_batch(extra_dims_as_rows(m->batch, *layout));
    for (int64_t e = 0; e < shape_product(layout->extra); ++e) with_batch(extra_slice(m->batch, *layout, e));
  }
  else if (in_input_class(m->batch, InputClass::empty_side) && layout->batch > 1)
    for (int64_t b = 0; b < layout->batch; ++b) with_batch(keep_row(m->batch, b));
  return out;
}

std::vector<Case> single_rows(const Case& c) {
  const auto* m = c.as<MetadataCase>();
  if (!m) return {};
  const Expected<BatchLayout> layout = validate_shapes(m->batch);
  if (!layout || !layout->extra.empty() || layout->batch < 2) return {};
  std::vector<Case> out;
  for (int64_t b = 0; b < layout->batch; ++b) {
    Case row = c;
    row.payload = MetadataCase{keep_row(m->batch, b)};
    out.push_back(std::move(row));
  }
  return out;
}

std::vector<Case> without_each_document(const Case& c) {
  const auto* m = c.as<MetadataCase>();
  if (!m) return {};
  const Expected<BatchLayout> layout = validate_shapes(m->batch);
  if (!layout || !layout->extra.empty() || layout->batch != 1) return {};
  std::set<int64_t> ids(m->batch.q.segment_ids.data.begin(), m->batch.q.segment_ids.data.end());
  ids.insert(m->batch.kv.segment_ids.data.begin(), m->batch.kv.segment_ids.data.end());
  ids.erase(0);
  std::vector<Case> out;
  for (int64_t id : ids) {
    PackedBatch b = m->batch;
    bool emptied = false;
    for (PackedSide* side : {&b.q, &b.kv}) {
      PackedSide kept{IntArray({1, 0}, {}), IntArray({1, 0}, {})};
      for (size_t t = 0; t < side->segment_ids.data.size(); ++t)
        if (side->segment_ids.data[t] != id)
          kept.segment_ids.data.push_back(side->segment_ids.data[t]), kept.segment_pos.data.push_back(side->segment_pos.data[t]);
      kept.segment_ids.shape[1] = kept.segment_pos.shape[1] = static_cast<int64_t>(kept.segment_ids.data.size());
      emptied = emptied || kept.segment_ids.data.empty();
      *side = std::move(kept);
    }
    if (emptied) continue;
    Case smaller = c;
    smaller.payload = MetadataCase{std::move(b)};
    out.push_back(std::move(smaller));
  }
  return out;
}

FailureCluster cluster_of_message(const std::string& message, int draw) {
  FailureCluster c;
  std::tie(c.key, c.rank) = root_of(failure_kind(message), {}, message);
  if (starts_with(message, "nondeterministic backend")) c.key = "nondeterministic backend";
  c.draws = 1, c.first_draw = draw, c.example = message;
  return c;
}

// ------------------------------------------------------------------ Triage
Triage::Triage(int shown, std::set<std::string> known, std::string backend, Capability capability)
    : shown_(std::max(shown, 1)), known_(std::move(known)), backend_(std::move(backend)), capability_(capability) {}

Triage::Draw Triage::classify(int draw, const std::string& message, const Case* drawn) const {
  Draw d;
  d.draw = draw, d.message = message, d.kind = failure_kind(message);
  if (drawn) d.classes = input_classes_of(*drawn);
  d.group = failure_group(message, drawn);
  return d;
}

std::string failure_group(const std::string& message, const Case* c) {
  const FailureKind kind = failure_kind(message);
  const std::string lead = kind == FailureKind::wrong_answer ? failure_signature(message) : root_of(kind, {}, message).first;
  return lead + " | " + classes_text(c ? input_classes_of(*c) : std::vector<InputClass>{});
}

FailureCluster& Triage::cluster_for(const std::string& key, FailureRank rank, std::optional<InputClass> cls, int draw) {
  auto [it, added] = clusters_.try_emplace(key);
  FailureCluster& c = it->second;
  if (added) {
    c.key = key, c.rank = rank, c.input_class = cls, c.first_draw = draw;
    if (cls) c.decline = decline_line(backend_, capability_, *cls);
  }
  c.first_draw = earliest(c.first_draw, draw);
  return c;
}

bool Triage::take(const Draw& d) {
  if (auto seen = group_cluster_.find(d.group); seen != group_cluster_.end()) {
    FailureCluster& c = clusters_[seen->second];
    ++c.draws;
    c.first_draw = earliest(c.first_draw, d.draw);  // a stored failure's cluster has none until now
    return false;
  }
  const bool ordinary = d.kind == FailureKind::wrong_answer && d.classes.empty();
  int& budget = ordinary ? ordinary_shrinks_ : other_shrinks_;
  if (!known_.count(d.group) && budget < shown_) {
    ++budget;
    return true;  // counted in place(), once its cluster is known
  }
  // Not shrunk: classed by the drawn case, which stays one line.
  const auto [key, rank] = root_of(d.kind, d.classes, d.message);
  FailureCluster& c = cluster_for(key, rank, d.classes.empty() ? std::nullopt : std::optional(d.classes.front()), d.draw);
  if (c.example.empty()) c.example = d.message;
  ++c.draws;
  group_cluster_[d.group] = key;
  return false;
}

bool Triage::same_root(const Draw& d, const std::string& message, const Case& candidate) const {
  // The same check failing the same way (Hypothesis's "same origin"): a shrink
  // that drifts to another field's mismatch is another bug, and would hide it.
  if (failure_kind(message) != d.kind) return false;
  if (d.kind == FailureKind::wrong_answer && failure_signature(message) != failure_signature(d.message)) return false;
  if (d.kind == FailureKind::exception && folded(message) != folded(d.message)) return false;
  for (InputClass c : input_classes_of(candidate))
    if (std::find(d.classes.begin(), d.classes.end(), c) == d.classes.end()) return false;
  return true;
}

std::string Triage::place_in_cluster(const Draw& d, const std::string& message, const Case& shrunk, bool count_draw) {
  const std::vector<InputClass> classes = input_classes_of(shrunk);
  auto [key, rank] = root_of(d.kind, classes, message);
  if (starts_with(message, "nondeterministic backend")) key = "nondeterministic backend";
  FailureCluster& c = cluster_for(key, rank, classes.empty() ? std::nullopt : std::optional(classes.front()),
                                  count_draw ? d.draw : -1);
  c.draws += count_draw;
  group_cluster_[d.group] = key;
  last_cluster_ = key;
  return key;
}

bool Triage::place(const Draw& d, const std::string& shrunk_message, const Case& shrunk) {
  const std::string key = place_in_cluster(d, shrunk_message, shrunk, true);
  if (!with_failure_.insert(key).second) return false;
  clusters_[key].example = shrunk_message;
  return true;
}

std::string Triage::adopt(const std::string& message, const Case& counterexample, const std::string& case_path) {
  const Draw d = classify(-1, message, &counterexample);
  const std::string key = place_in_cluster(d, message, counterexample, false);
  FailureCluster& c = clusters_[key];
  c.stored = true;
  if (with_failure_.insert(key).second) c.example = message, c.counterexample = case_path;
  return key;
}

void Triage::attach(const std::string& cluster, const std::string& case_path) {
  if (auto it = clusters_.find(cluster); it != clusters_.end()) it->second.counterexample = case_path;
}

std::vector<FailureCluster> Triage::clusters() const {
  std::vector<FailureCluster> out;
  for (const auto& [key, c] : clusters_) out.push_back(c);
  return out;
}

// ------------------------------------------------------------------ ranking
void merge_clusters(std::vector<FailureCluster>& into, const std::vector<FailureCluster>& add) {
  for (const FailureCluster& c : add) {
    auto it = std::find_if(into.begin(), into.end(), [&](const FailureCluster& d) { return d.key == c.key; });
    if (it == into.end()) {
      into.push_back(c);
      continue;
    }
    it->draws += c.draws;
    it->first_draw = earliest(it->first_draw, c.first_draw);
    if (it->counterexample.empty()) it->counterexample = c.counterexample, it->example = c.example;
  }
}

std::string blank_numbers(const std::string& text) {
  static const std::regex number("-?[0-9]+(\\.[0-9]+)?(e[-+]?[0-9]+)?");
  return std::regex_replace(text, number, "#");
}

std::string failure_signature(const std::string& message) {
  const size_t colon = message.find(':');
  std::string lead = colon == std::string::npos ? message : message.substr(0, colon);
  // An index is one field whatever its rank: "q_seqlens[0, 1, 0] (slice 0, row 1,
  // slot 0)" of a vmapped draw and "q_seqlens[1, 0] (row 1, slot 0)" are one
  // mismatch, so that shrinking may drop the extra dims.
  static const std::regex index("\\[#(, #)*\\]( \\((slice #, )?row #, slot #\\))?");
  return std::regex_replace(blank_numbers(lead.substr(0, 120)), index, "[#]");
}

}  // namespace attn_oracle::runner
