// metadata_through_attention.cpp: see the header. Deliberately plain loops: it
// plays a kernel, so it must read exactly the integers a kernel reads.
#include "attn_oracle/properties/metadata_through_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>

#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/model/validate.hpp"

namespace attn_oracle::inline properties {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct Run {
  int64_t start = 0, length = 0;
};

// What messages call the compacted arrays: a packed batch's fields, or a
// micro-sequence's, which has no cu_seqlens_kv or ragged offsets (its queries
// start at cu_seqlens_q, its keys at first_document_begin + cu_seqlens_k).
struct FieldNames {
  std::string cu_q, cu_kv, start_q, start_kv;
  bool starts_are_arrays;  // false: the starts derive from the cu_seqlens, no sizes of their own
};
const FieldNames kBatchFields{"cu_seqlens_q", "cu_seqlens_kv", "ragged_offsets_q", "ragged_offsets_kv", true};
const FieldNames kMicroSequenceFields{"cu_seqlens_q", "cu_seqlens_k", "cu_seqlens_q",
                                      "first_document_begin + cu_seqlens_k", false};

// Document s's run on one side as a kernel reads it, or the reason it cannot be
// read, naming the side's fields `cu_name` (lengths) and `start_name` (starts).
std::variant<Run, std::string> run_of(const std::vector<int64_t>& cu, const std::vector<int64_t>& ragged,
                                      const std::string& cu_name, const std::string& start_name, const char* side,
                                      size_t s, int64_t tokens) {
  int64_t length = 0;
  const int64_t start = ragged[s];
  std::ostringstream why;
  if (__builtin_sub_overflow(cu[s + 1], cu[s], &length))
    why << cu_name << "[" << s + 1 << "] - " << cu_name << "[" << s << "] overflows int64";
  else if (length < 0)
    why << cu_name << "[" << s + 1 << "] = " << cu[s + 1] << " < " << cu_name << "[" << s << "] = " << cu[s]
        << ": a negative length";
  else if (start < 0 || start > tokens || length > tokens - start)
    why << "document " << s << " reads " << length << " " << side << " tokens from token " << start << " ("
        << start_name << "[" << s << "], " << cu_name << "[" << s << ".." << s + 1 << "]) of a tensor of " << tokens;
  if (why.tellp() > 0) return why.str();
  return Run{start, length};
}

// One document: queries qr against keys kr under the index rule.
void attend_document(Run qr, Run kr, MaskKind mask, Window window, const VarlenInputs& in, VarlenOutputs& out) {
  const int64_t D = in.dim;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> scores(kr.length);
  for (int64_t a = 0; a < qr.length; ++a) {
    const double* q = &in.q[(qr.start + a) * D];
    double top = -std::numeric_limits<double>::infinity();
    for (int64_t b = 0; b < kr.length; ++b) {
      scores[b] = -std::numeric_limits<double>::infinity();
      if (!ref::kernel_rule_allows(mask, window, a, b, qr.length, kr.length)) continue;
      double dot = 0;
      for (int64_t d = 0; d < D; ++d) dot += q[d] * in.k[(kr.start + b) * D + d];
      scores[b] = dot * scale;
      top = std::isnan(scores[b]) || scores[b] > top ? scores[b] : top;
    }
    double* o = &out.o[(qr.start + a) * D];
    std::fill(o, o + D, 0.0);
    if (top == -std::numeric_limits<double>::infinity()) {
      out.lse[qr.start + a] = top;
      continue;
    }
    double sum = 0;
    for (int64_t b = 0; b < kr.length; ++b) {
      if (scores[b] == -std::numeric_limits<double>::infinity()) continue;
      const double p = std::exp(scores[b] - top);
      sum += p;
      for (int64_t d = 0; d < D; ++d) o[d] += p * in.v[(kr.start + b) * D + d];
    }
    for (int64_t d = 0; d < D; ++d) o[d] /= sum;
    out.lse[qr.start + a] = top + std::log(sum);
  }
}

// A value in [-1, 1) from (tensor, token, d): the same on every run and replay.
double token_value(uint64_t tensor, int64_t token, int64_t d) {
  uint64_t x = (tensor << 56) ^ (static_cast<uint64_t>(token) << 8) ^ static_cast<uint64_t>(d);
  x ^= x >> 33, x *= 0xff51afd7ed558ccdULL, x ^= x >> 33, x *= 0xc4ceb9fe1a85ec53ULL, x ^= x >> 33;
  return static_cast<double>(x >> 11) / static_cast<double>(uint64_t{1} << 52) - 1.0;
}

// Tokens [0, tokens) that some document of the compacted arrays holds.
std::vector<bool> held_tokens(const std::vector<int64_t>& cu, const std::vector<int64_t>& ragged, int64_t tokens) {
  std::vector<bool> held(tokens, false);
  for (size_t s = 0; s + 1 < cu.size(); ++s)
    for (int64_t t = ragged[s]; t < ragged[s] + cu[s + 1] - cu[s]; ++t) held[t] = true;
  return held;
}

// The compacted document of `md` holding q token g, or -1.
int64_t document_of(const Metadata& md, int64_t g) {
  for (size_t s = 0; s + 1 < md.cu_seqlens_q.size(); ++s)
    if (g >= md.ragged_offsets_q[s] && g < md.ragged_offsets_q[s] + md.cu_seqlens_q[s + 1] - md.cu_seqlens_q[s])
      return static_cast<int64_t>(s);
  return -1;
}

// One compacted array of the backend's metadata beside the reference's.
struct FieldPair {
  const char* name;
  const std::vector<int64_t>* got;
  const std::vector<int64_t>* want;
};

// The first of entries s and s + 1 (document s's) that `got` has wrong, or "".
std::string first_wrong_entry(std::initializer_list<FieldPair> fields, int64_t s) {
  for (const FieldPair& f : fields)
    for (int64_t i : {s, s + 1}) {
      const auto &g = *f.got, &w = *f.want;
      if (i >= static_cast<int64_t>(w.size())) continue;
      if (i >= static_cast<int64_t>(g.size()))
        return std::string(f.name) + " has " + std::to_string(g.size()) + " entries, expected " + std::to_string(w.size());
      if (g[i] != w[i])
        return std::string(f.name) + "[" + std::to_string(i) + "]: backend " + std::to_string(g[i]) + ", expected " +
               std::to_string(w[i]);
    }
  return "";
}

std::string field_behind(const Metadata& got, const Metadata& want, int64_t s) {
  return first_wrong_entry({{"cu_seqlens_q", &got.cu_seqlens_q, &want.cu_seqlens_q},
                            {"cu_seqlens_kv", &got.cu_seqlens_kv, &want.cu_seqlens_kv},
                            {"ragged_offsets_q", &got.ragged_offsets_q, &want.ragged_offsets_q},
                            {"ragged_offsets_kv", &got.ragged_offsets_kv, &want.ragged_offsets_kv}},
                           s);
}

// [tokens, dim] values of `tensor`, NaN in every token not held.
std::vector<double> poisoned_tensor(uint64_t tensor, int64_t tokens, int64_t dim, const std::vector<bool>& held) {
  std::vector<double> t(tokens * dim);
  for (int64_t i = 0; i < tokens; ++i)
    for (int64_t d = 0; d < dim; ++d) t[i * dim + d] = held[i] ? token_value(tensor, i, d) : kNaN;
  return t;
}

bool same(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b)); }

// The first output where two runs differ: q token `token`, dimension `dim`
// (-1: the lse), with both values.
struct Change {
  int64_t token = 0, dim = -1;
  double got = 0, want = 0;
  // "o of q token 3 (row 0, token 3), d 1: 0.25, expected nan", `where` after the token.
  std::string describe(const std::string& where = "") const {
    std::ostringstream os;
    os << (dim < 0 ? "lse" : "o") << " of q token " << token << where << (dim < 0 ? "" : ", d " + std::to_string(dim))
       << ": " << got << ", expected " << want;
    return os.str();
  }
};

std::optional<Change> first_change(const VarlenOutputs& a, const VarlenOutputs& b, int64_t tokens, int64_t dim) {
  for (int64_t g = 0; g < tokens; ++g)
    for (int64_t d = 0; d <= dim; ++d) {
      const bool is_lse = d == dim;
      const double x = is_lse ? a.lse[g] : a.o[g * dim + d], y = is_lse ? b.lse[g] : b.o[g * dim + d];
      if (!same(x, y)) return Change{g, is_lse ? -1 : d, x, y};
    }
  return std::nullopt;
}

// A micro-sequence as the compacted arrays a kernel reads: q rows contiguous
// from 0, keys at first_document_begin + cu_seqlens_k (or why that overflows).
std::variant<Metadata, std::string> as_varlen(const MicroSequenceMetadata& m) {
  Metadata md;
  md.cu_seqlens_q = m.cu_seqlens_q, md.cu_seqlens_kv = m.cu_seqlens_k, md.ragged_offsets_q = m.cu_seqlens_q;
  for (size_t s = 0; s < m.cu_seqlens_k.size(); ++s) {
    int64_t at = 0;
    if (__builtin_add_overflow(m.first_document_begin, m.cu_seqlens_k[s], &at))
      return "first_document_begin " + std::to_string(m.first_document_begin) + " + cu_seqlens_k[" + std::to_string(s) +
             "] " + std::to_string(m.cu_seqlens_k[s]) + " overflows int64";
    md.ragged_offsets_kv.push_back(at);
  }
  return md;
}

std::string micro_field_behind(const MicroSequenceMetadata& got, const MicroSequenceMetadata& want, int64_t s) {
  if (got.first_document_begin != want.first_document_begin)
    return "first_document_begin: backend " + std::to_string(got.first_document_begin) + ", expected " +
           std::to_string(want.first_document_begin);
  return first_wrong_entry({{"cu_seqlens_q", &got.cu_seqlens_q, &want.cu_seqlens_q},
                            {"cu_seqlens_k", &got.cu_seqlens_k, &want.cu_seqlens_k}},
                           s);
}

std::variant<VarlenOutputs, std::string> consume_named(const Metadata& md, MaskKind mask, Window window,
                                                       const VarlenInputs& in, const FieldNames& names) {
  const size_t n = md.cu_seqlens_q.size();
  if (n == 0 || md.cu_seqlens_kv.size() != n || md.ragged_offsets_q.size() != n || md.ragged_offsets_kv.size() != n) {
    std::string sizes = names.cu_q + " " + std::to_string(n) + ", " + names.cu_kv + " " +
                        std::to_string(md.cu_seqlens_kv.size());
    if (names.starts_are_arrays)
      sizes += ", ragged_offsets_q " + std::to_string(md.ragged_offsets_q.size()) + ", ragged_offsets_kv " +
               std::to_string(md.ragged_offsets_kv.size());
    return "the compacted arrays disagree on the number of documents: " + sizes + " entries";
  }
  VarlenOutputs out{std::vector<double>(in.q_tokens * in.dim, 0.0),
                    std::vector<double>(in.q_tokens, -std::numeric_limits<double>::infinity())};
  for (size_t s = 0; s + 1 < n; ++s) {
    auto qr = run_of(md.cu_seqlens_q, md.ragged_offsets_q, names.cu_q, names.start_q, "q", s, in.q_tokens);
    auto kr = run_of(md.cu_seqlens_kv, md.ragged_offsets_kv, names.cu_kv, names.start_kv, "kv", s, in.kv_tokens);
    if (auto* why = std::get_if<std::string>(&qr)) return *why;
    if (auto* why = std::get_if<std::string>(&kr)) return *why;
    attend_document(std::get<Run>(qr), std::get<Run>(kr), mask, window, in, out);
  }
  return out;
}

// Both metadata through the kernel over `in`: the first output they change, or
// the sentence that ends the comparison (metadata a kernel cannot read).
std::variant<std::optional<Change>, std::string> compare_through_kernel(const Metadata& got, const Metadata& want,
                                                                        MaskKind mask, Window window,
                                                                        const VarlenInputs& in,
                                                                        const FieldNames& names) {
  const auto truth = consume_named(want, mask, window, in, names);
  if (auto* why = std::get_if<std::string>(&truth)) return "the reference's metadata cannot drive attention: " + *why;
  const auto ran = consume_named(got, mask, window, in, names);
  if (auto* why = std::get_if<std::string>(&ran)) return "a kernel driven by this metadata reads out of bounds: " + *why;
  return first_change(std::get<VarlenOutputs>(ran), std::get<VarlenOutputs>(truth), in.q_tokens, in.dim);
}

}  // namespace

std::variant<VarlenOutputs, std::string> consume_metadata(const Metadata& md, MaskKind mask, Window window,
                                                          const VarlenInputs& in) {
  return consume_named(md, mask, window, in, kBatchFields);
}

VarlenInputs poisoned_inputs(const PackedBatch& batch, const Metadata& reference, int64_t dim) {
  const BatchLayout l = validate_shapes(batch).value();
  VarlenInputs in{l.rows() * l.q_len, l.rows() * l.kv_len, dim, {}, {}, {}};
  const auto q_held = held_tokens(reference.cu_seqlens_q, reference.ragged_offsets_q, in.q_tokens);
  const auto kv_held = held_tokens(reference.cu_seqlens_kv, reference.ragged_offsets_kv, in.kv_tokens);
  in.q = poisoned_tensor(0, in.q_tokens, dim, q_held);
  in.k = poisoned_tensor(1, in.kv_tokens, dim, kv_held), in.v = poisoned_tensor(2, in.kv_tokens, dim, kv_held);
  return in;
}

std::optional<std::string> attention_difference(const PackedBatch& batch, const Metadata& got, const Metadata& want) {
  const auto compared =
      compare_through_kernel(got, want, batch.mask, batch.window, poisoned_inputs(batch, want), kBatchFields);
  if (auto* why = std::get_if<std::string>(&compared)) return *why;
  const auto& change = std::get<std::optional<Change>>(compared);
  if (!change) return std::nullopt;
  const int64_t g = change->token, tq = validate_shapes(batch).value().q_len;
  std::ostringstream os;
  os << change->describe(" (row " + std::to_string(g / tq) + ", token " + std::to_string(g % tq) + ")") << "; ";
  const int64_t s = document_of(want, g), s_got = document_of(got, g);
  std::string field = s >= 0 ? field_behind(got, want, s) : "";
  if (field.empty() && s_got >= 0) field = field_behind(got, want, s_got);
  if (s < 0) os << "the token is in no document, yet the backend's document " << s_got << " holds it";
  else os << "document " << s;
  os << (field.empty() ? "" : ": " + field);
  return os.str();
}

std::optional<std::string> micro_sequence_attention_difference(int64_t buffer_tokens, const MicroSequenceMetadata& got,
                                                               const MicroSequenceMetadata& want) {
  const int64_t dim = 4, q_tokens = want.end - want.begin;
  std::vector<bool> held(buffer_tokens, false);
  for (int64_t t = std::max<int64_t>(0, want.first_document_begin); t < std::min(want.end, buffer_tokens); ++t) held[t] = true;
  const VarlenInputs in{q_tokens, buffer_tokens, dim, poisoned_tensor(0, q_tokens, dim, std::vector<bool>(q_tokens, true)),
                        poisoned_tensor(1, buffer_tokens, dim, held), poisoned_tensor(2, buffer_tokens, dim, held)};
  const auto want_md = as_varlen(want), got_md = as_varlen(got);
  if (auto* why = std::get_if<std::string>(&want_md)) return "the reference's metadata cannot drive attention: " + *why;
  if (auto* why = std::get_if<std::string>(&got_md)) return "a kernel driven by this metadata cannot address the buffer: " + *why;
  const Metadata& reference = std::get<Metadata>(want_md);
  const auto compared =
      compare_through_kernel(std::get<Metadata>(got_md), reference, MaskKind::causal_bottom_right, Window{}, in,
                             kMicroSequenceFields);
  if (auto* why = std::get_if<std::string>(&compared)) return *why;
  const auto& change = std::get<std::optional<Change>>(compared);
  if (!change) return std::nullopt;
  const int64_t s = std::max<int64_t>(0, document_of(reference, change->token));  // every query is in a document
  const std::string field = micro_field_behind(got, want, s);
  return change->describe() + "; document " + std::to_string(s) + (field.empty() ? "" : ": " + field);
}

std::optional<std::string> micro_sequence_prefix_influence(int64_t buffer_tokens, const MicroSequenceMetadata& got,
                                                           const MicroSequenceMetadata& want) {
  const int64_t dim = 4, q_tokens = want.end - want.begin;
  const auto md = as_varlen(got);
  if (auto* why = std::get_if<std::string>(&md)) return "a kernel driven by this metadata cannot address the buffer: " + *why;
  std::vector<bool> every(buffer_tokens, true), after_prefix(buffer_tokens, true);
  for (int64_t t = 0; t < std::min(want.first_document_begin, buffer_tokens); ++t) after_prefix[t] = false;
  const VarlenInputs clean{q_tokens, buffer_tokens, dim, poisoned_tensor(0, q_tokens, dim, std::vector<bool>(q_tokens, true)),
                           poisoned_tensor(1, buffer_tokens, dim, every), poisoned_tensor(2, buffer_tokens, dim, every)};
  VarlenInputs poisoned = clean;
  poisoned.k = poisoned_tensor(1, buffer_tokens, dim, after_prefix), poisoned.v = poisoned_tensor(2, buffer_tokens, dim, after_prefix);
  const auto a = consume_metadata(std::get<Metadata>(md), MaskKind::causal_bottom_right, Window{}, clean);
  if (auto* why = std::get_if<std::string>(&a)) return "a kernel driven by this metadata reads out of bounds: " + *why;
  const auto b = consume_metadata(std::get<Metadata>(md), MaskKind::causal_bottom_right, Window{}, poisoned);
  const auto change = first_change(std::get<VarlenOutputs>(b), std::get<VarlenOutputs>(a), q_tokens, dim);
  if (!change) return std::nullopt;
  std::ostringstream keys;
  for (size_t s = 0; s < got.cu_seqlens_k.size(); ++s) keys << (s ? ", " : "") << got.cu_seqlens_k[s];
  return change->describe() + " without them; the kernel reads keys at first_document_begin " +
         std::to_string(got.first_document_begin) + " + cu_seqlens_k [" + keys.str() + "]";
}

}  // namespace attn_oracle::properties
