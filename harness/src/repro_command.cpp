// repro_command.cpp: `repro` and the GoogleTest file it writes (harness/repro.hpp).
// Tested by tests/repro_test.cpp and the repro_twin.* ctest tests, which build
// the file written for a planted twin and run it against the twin (it fails)
// and against the reference (it passes).
#include "attn_oracle/harness/repro.hpp"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "attn_oracle/cases/attention_case.hpp"
#include "attn_oracle/cases/case_op.hpp"
#include "attn_oracle/cases/kv_buffer_case.hpp"
#include "attn_oracle/cases/metadata_case.hpp"
#include "attn_oracle/properties/property_check.hpp"
#include "attn_oracle/reference/attention.hpp"
#include "attn_oracle/reference/small_seq.hpp"
#include "attn_oracle/reference/tolerance.hpp"
#include "attn_oracle/cases/reference_backend.hpp"
#include "attn_oracle/runner/replay.hpp"

namespace attn_oracle::inline harness {
namespace {

std::string number(double x) {
  if (std::isinf(x)) return x < 0 ? "-kInf" : "kInf";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

template <class T, class F>
std::string list(const std::vector<T>& v, F show) {
  std::string out = "{";
  for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + show(v[i]);
  return out + "}";
}
std::string ints(const std::vector<int64_t>& v) { return list(v, [](int64_t x) { return std::to_string(x); }); }
std::string doubles(const std::vector<double>& v) { return list(v, number); }
std::string shape(const Shape& s) { return ints(std::vector<int64_t>(s.begin(), s.end())); }

std::string int_array(const IntArray& a) { return "ints(" + shape(a.shape) + ", " + ints(a.data) + ")"; }

std::string batch_code(const PackedBatch& b, const std::string& to) {
  std::ostringstream os;
  os << "  " << to << ".mask = attn_oracle::MaskKind::" << to_string(b.mask) << ";\n"
     << "  " << to << ".window = {" << b.window.left << ", " << b.window.right << "};\n"
     << "  " << to << ".max_segments = " << b.max_segments << ";\n"
     << "  " << to << ".q = {" << int_array(b.q.segment_ids) << ", " << int_array(b.q.segment_pos) << "};\n"
     << "  " << to << ".kv = {" << int_array(b.kv.segment_ids) << ", " << int_array(b.kv.segment_pos) << "};\n";
  return os.str();
}

std::string shape_code(const AttentionShape& s, const std::string& to) {
  std::ostringstream os;
  os << "  " << to << ".heads_q = " << s.heads_q << ";\n  " << to << ".heads_kv = " << s.heads_kv << ";\n  " << to
     << ".head_dim = " << s.head_dim << ";\n  " << to << ".dtype = attn_oracle::Dtype::" << to_string(s.dtype) << ";\n  "
     << to << ".backward = " << (s.backward ? "true" : "false") << ";\n";
  if (s.scale) os << "  " << to << ".scale = " << number(*s.scale) << ";\n";
  return os.str();
}

std::string inputs_code(const AttentionInputs& in) {
  std::string out = "  attn_oracle::AttentionInputs inputs;  // rounded to the dtype, widened to double\n";
  out += "  inputs.q = " + doubles(in.q) + ";\n  inputs.k = " + doubles(in.k) + ";\n  inputs.v = " + doubles(in.v) + ";\n";
  if (!in.d_o.empty()) out += "  inputs.d_o = " + doubles(in.d_o) + ";\n";
  return out;
}

// An expected error: the code, exactly.
std::string expect_error(const Error& e) {
  return "  ASSERT_FALSE(got) << \"the backend accepted an input the reference rejects\";\n"
         "  EXPECT_EQ(attn_oracle::to_string(got.error().code), \"" +
         std::string(to_string(e.code)) + "\") << got.error().message;  // reference: " + e.message + "\n";
}

std::string metadata_body(Backend& reference, const MetadataCase& m) {
  std::string out = "  ASSERT_NE(backend->metadata(), nullptr);\n  attn_oracle::PackedBatch batch;\n" +
                    batch_code(m.batch, "batch") + "  const auto got = backend->metadata()->metadata(batch);\n";
  const Expected<Metadata> want = reference.metadata()->metadata(m.batch);
  if (!want) return out + expect_error(want.error());
  out += "  ASSERT_TRUE(got) << got.error().message;\n  // The reference's metadata (docs/semantics.md#3-metadata): every field exactly.\n";
  const Metadata& w = want.value();
  for (auto [name, v] : {std::pair{"q_seqlens", &w.q_seqlens}, {"kv_seqlens", &w.kv_seqlens}, {"q_offsets", &w.q_offsets},
                         {"kv_offsets", &w.kv_offsets}, {"cu_seqlens_q", &w.cu_seqlens_q}, {"cu_seqlens_kv", &w.cu_seqlens_kv},
                         {"ragged_offsets_q", &w.ragged_offsets_q}, {"ragged_offsets_kv", &w.ragged_offsets_kv}})
    out += "  EXPECT_EQ(got->" + std::string(name) + ", (std::vector<int64_t>" + ints(*v) + "));\n";
  return out;
}

// The budgets of the tolerance rule for the reference's own answer: what it
// allows any backend, whatever that backend answers.
std::string float_checks(const std::vector<ToleranceCheck>& checks, const std::vector<std::pair<std::string, const std::vector<double>*>>& want) {
  std::string out =
      "  // Floats: max |got - expected| must stay within the budget k * e + eps, where expected is the float64\n"
      "  // reference, e the error of a naive run in the same precision (its floor) and eps the dtype's\n"
      "  // (docs/semantics.md#6-tolerance; k = 2 for o and lse, 3 for gradients), computed when this was written.\n";
  for (const auto& [name, values] : want) {
    double budget = tolerance_floor(Dtype::fp32);
    for (const ToleranceCheck& c : checks)
      if (c.tensor == name) budget = c.budget;
    out += "  expect_close(\"" + name + "\", got->" + (name == "o" || name == "lse" || name == "p" ? name : "grads->" + name) +
           ", " + doubles(*values) + ", " + number(budget) + ");\n";
  }
  return out;
}

std::string attention_body(const AttentionCase& a, const AttentionInputs& in, ProducedOutputs produced, bool small) {
  const AttentionProblem& p = a.problem;
  std::string out = std::string("  ASSERT_NE(backend->") + (small ? "small_seq" : "attention") +
                    "(), nullptr);\n  attn_oracle::AttentionProblem problem;\n" + batch_code(p.batch, "problem.batch") +
                    shape_code(p.shape, "problem.shape") + inputs_code(in) + "  const auto got = backend->" +
                    (small ? "small_seq()->small_seq" : "attention()->attention") + "(problem, inputs);\n";
  AttentionResult want;
  std::vector<double> p_weights;
  if (small) {
    const Expected<SmallSeqResult> r = ref::small_seq(p, in);
    if (!r) return out + expect_error(r.error());
    want.o = r->o, want.grads = r->grads, p_weights = r->p;
  } else {
    const Expected<AttentionResult> r = ref::attention_dense_masked(p, in);
    if (!r) return out + expect_error(r.error());
    want = r.value();
  }
  out += "  ASSERT_TRUE(got) << got.error().message;\n";
  produced.lse = produced.lse && !small;
  const std::vector<ToleranceCheck> checks = check_attention_tolerance(p, in, want, want, produced);
  std::vector<std::pair<std::string, const std::vector<double>*>> tensors = {{"o", &want.o}};
  if (produced.lse) tensors.emplace_back("lse", &want.lse);
  if (small && produced.small_seq_p) tensors.emplace_back("p", &p_weights);
  if (want.grads && produced.gradients) {
    out += "  ASSERT_TRUE(got->grads.has_value());\n";
    tensors.insert(tensors.end(), {{"dq", &want.grads->dq}, {"dk", &want.grads->dk}, {"dv", &want.grads->dv}});
  }
  return out + float_checks(checks, tensors);
}

std::string kv_buffer_body(const KvBufferCase& kv) {
  const KvBufferProblem& p = kv.problem;
  std::string out = "  ASSERT_NE(backend->kv_buffer(), nullptr);\n  attn_oracle::KvBufferProblem problem;\n  problem.doc_lengths = " +
                    ints(p.doc_lengths) + ";\n  problem.micro_seq_tokens = " + std::to_string(p.micro_seq_tokens) + ";\n" +
                    shape_code(p.shape, "problem.shape") +
                    "  // The reference's metadata of each micro-sequence (docs/semantics.md#3-metadata), exactly.\n";
  int64_t n = 0;
  for (int64_t l : p.doc_lengths) n += l;
  for (int64_t i = 0; p.micro_seq_tokens > 0 && i * p.micro_seq_tokens < n; ++i) {
    const Expected<MicroSequenceMetadata> w = reference_kv_buffer().micro_sequence(p, i);
    if (!w) break;
    const std::string g = "got" + std::to_string(i);
    out += "  const auto " + g + " = backend->kv_buffer()->micro_sequence(problem, " + std::to_string(i) + ");\n  ASSERT_TRUE(" +
           g + ") << " + g + ".error().message;\n  EXPECT_EQ(" + g + "->first_document_begin, " +
           std::to_string(w->first_document_begin) + ");\n";
    for (auto [name, v] : {std::pair{"cu_seqlens_q", &w->cu_seqlens_q}, {"cu_seqlens_k", &w->cu_seqlens_k},
                           {"q_document", &w->q_document}, {"q_position", &w->q_position},
                           {"kv_document", &w->kv_document}, {"kv_position", &w->kv_position}})
      out += "  EXPECT_EQ(" + g + "->" + name + ", (std::vector<int64_t>" + ints(*v) + ")) << \"micro-sequence " +
             std::to_string(i) + "\";\n";
  }
  return out;
}

std::string test_name(const std::string& property) {
  std::string out;
  bool upper = true;
  for (char c : property) {
    if (!std::isalnum(static_cast<unsigned char>(c))) upper = true;
    else out += upper ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c, upper = false;
  }
  return out.empty() ? "Case" : out;
}

constexpr const char* kHelpers = R"(namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

attn_oracle::IntArray ints(attn_oracle::Shape shape, std::vector<int64_t> data) {
  return attn_oracle::IntArray(std::move(shape), std::move(data));
}

// The largest |got - expected| within budget; infinities (lse = -inf where a query attends nothing) equal.
void expect_close(const char* name, const std::vector<double>& got, const std::vector<double>& expected, double budget) {
  ASSERT_EQ(got.size(), expected.size()) << name;
  size_t worst = 0;
  double error = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::isinf(expected[i]) || std::isinf(got[i]) ? (got[i] == expected[i] ? 0.0 : kInf)
                                                                    : std::abs(got[i] - expected[i]);
    if (!(e <= error)) worst = i, error = e;
  }
  EXPECT_LE(error, budget) << name << "[" << worst << "]: got " << got[worst] << ", expected " << expected[worst];
}

}  // namespace
)";

}  // namespace

std::string gtest_reproduction(const Disagreement& d, const Backend& backend, const std::string& case_path,
                               const std::string& property) {
  std::unique_ptr<Backend> reference = BackendRegistry::instance().make("reference");
  std::string body;
  if (const auto* m = d.direct.as<MetadataCase>()) body = metadata_body(*reference, *m);
  else if (const auto* kv = d.direct.as<KvBufferCase>()) body = kv_buffer_body(*kv);
  else if (const AttentionCase* a = attention_fields(d.direct.payload)) {
    const Expected<AttentionInputs> in = attention_inputs(*a);
    if (!in) return "";
    body = attention_body(*a, in.value(), backend.outputs(), d.direct.as<SmallSeqCase>() != nullptr);
  }
  if (body.empty()) return "";
  std::ostringstream os;
  os << "// Reproduction of " << (property.empty() ? "a disagreement with the reference" : property) << " on backend "
     << backend.name() << " (" << backend.version() << "),\n// written by `attn-oracle repro` from " << case_path << ".\n//\n";
  std::istringstream summary(case_summary(d.direct));
  for (std::string line; std::getline(summary, line);) os << "// input: " << line << "\n";
  if (!d.lines.empty()) os << "// differs: " << d.lines.front() << "\n";
  if (d.transformed) os << "// (the call the property made on the counterexample after transforming it)\n";
  os << "//\n// Build it with the backend's sources and the seam it implements; it needs no oracle:\n"
        "//   add_executable(repro repro_test.cpp my_backend.cpp)\n"
        "//   target_link_libraries(repro PRIVATE my_library attn_oracle::seam GTest::gtest_main)\n"
        "#include <gtest/gtest.h>\n\n#include <cmath>\n#include <limits>\n#include <vector>\n\n"
        "#include <attn_oracle/seam/backend.hpp>\n\n"
     << kHelpers
     << "\n// The backend under test, by the name it registers (ATTN_ORACLE_REGISTER_BACKEND).\nconstexpr const char* kBackend = \""
     << backend.name() << "\";\n\nTEST(Repro, " << test_name(property) << ") {\n"
     << "  const auto backend = attn_oracle::BackendRegistry::instance().make(kBackend);\n"
     << "  ASSERT_NE(backend, nullptr) << kBackend << \" is not registered: link its source\";\n"
     << body << "}\n";
  return os.str();
}

int repro_command(const ReproOptions& options) {
  const std::string &case_path = options.case_path, &out_path = options.out_path, &direct_path = options.direct_path;
  std::string backend_name = options.backend;
  const Expected<Case> c = read_case_file(case_path);
  if (!c) return std::cerr << "attn-oracle repro: cannot read " << case_path << ": " << c.error().message << "\n", 1;
  if (backend_name.empty() && c->property) backend_name = c->property->backend;
  std::unique_ptr<Backend> backend = BackendRegistry::instance().make(backend_name);
  if (!backend)
    return std::cerr << "attn-oracle repro: backend '" << backend_name
                     << "' is not registered in this program (--backend NAME picks one)\n", 1;
  const auto found = find_disagreement(*backend, c.value());
  if (const auto* none = std::get_if<NoDisagreement>(&found)) {
    if (none->declined) return std::cout << "SKIP\n  " << none->why << "\n", 4;
    return std::cerr << "attn-oracle repro: " << none->why << "\n", 3;
  }
  const auto* d = &std::get<Disagreement>(found);
  std::cerr << "attn-oracle repro: " << backend->name() << " (" << backend->version() << ") differs from the reference on"
            << (d->transformed ? " the call its property made after transforming the case (transformed):\n" : ":\n");
  std::istringstream summary(case_summary(d->direct));
  for (std::string line; std::getline(summary, line);) std::cerr << "  " << line << "\n";
  if (!d->lines.empty()) std::cerr << "  " << d->lines.front() << "\n";
  if (!direct_path.empty()) {
    Case direct = promote_case(d->direct, "the call of " + (c->property ? c->property->id : std::string("the case")) +
                                              " that " + backend->name() + " answered differently: " +
                                              (d->lines.empty() ? std::string() : d->lines.front()));
    if (!write_case_file(direct_path, direct)) return std::cerr << "attn-oracle repro: cannot write " << direct_path << "\n", 1;
  }
  if (!direct_path.empty() && out_path.empty()) return 0;
  const std::string test = gtest_reproduction(*d, *backend, case_path, c->property ? c->property->id : "");
  if (test.empty()) return std::cerr << "attn-oracle repro: no GoogleTest form for a " << op_name(d->direct) << " case\n", 1;
  if (out_path.empty() || out_path == "-") return std::cout << test, 0;
  std::ofstream(out_path) << test;
  std::cerr << "attn-oracle repro: wrote " << out_path << "\n";
  return 0;
}

}  // namespace attn_oracle::harness
