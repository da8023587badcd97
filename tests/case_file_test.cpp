// case_file_test.cpp: the case-file reader and writer (case_file.hpp, one
// CaseOp per op).
//
// Round trips (metadata, attention with a seed, attention with explicit tensors,
// sharding, a counterexample's property record), schema 1 files still read,
// every reading error path with the field named in the message, defaults, the
// op table, and the shapes of the JSON that eval prints.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include <gtest/gtest.h>

#include "attn_oracle/cases/case_file.hpp"
#include "attn_oracle/cases/case_op.hpp"
#include "attn_oracle/reference/metadata.hpp"

namespace attn_oracle {
namespace {

using nlohmann::json;

// A valid metadata case: q ids [1, 2, 4] broadcast against kv ids [2, 4].
json base_case() {
  return json::parse(R"({
    "schema": "attn-oracle.case/1", "op": "metadata", "note": "base",
    "mask": "padding_causal", "window": [2, -1], "max_segments": 2,
    "q":  {"segment_ids": [[[1, 1, 2, 0], [1, 1, 1, 1]]], "segment_pos": [[0, 1, 0, 0], [0, 1, 2, 3]]},
    "kv": {"segment_ids": [[1, 2, 2, 0], [1, 1, 0, 0]], "segment_pos": [[0, 0, 1, 0], [0, 1, 0, 0]]},
    "expected": {"error": {"code": "none"}}
  })");
}

json attention_case() {
  json j = base_case();
  j["op"] = "attention";
  j.erase("expected");
  j.update(json::parse(R"({"heads_q": 2, "heads_kv": 1, "head_dim": 3, "dtype": "bf16",
                           "scale": 0.25, "backward": true, "data": {"seed": 7}})"));
  return j;
}

std::filesystem::path temp_path(const std::string& name) {
  return std::filesystem::temp_directory_path() / "attn_oracle_case_file_test" / name;
}

Case read_back(const Case& c, const std::string& name) {
  const auto path = temp_path(name);
  EXPECT_TRUE(write_case_file(path.string(), c));
  auto back = read_case_file(path.string());
  EXPECT_TRUE(back.ok()) << (back ? "" : back.error().message);
  return back ? back.value() : Case{};
}

void expect_same(const Case& a, const Case& b) {
  EXPECT_EQ(op_of(a).name(), op_of(b).name());
  EXPECT_TRUE(a.payload == b.payload);
  EXPECT_EQ(a.expected, b.expected);
  EXPECT_EQ(a.note, b.note);
  EXPECT_EQ(a.property, b.property);
}

const PackedBatch& batch(const Case& c) { return c.as<MetadataCase>()->batch; }
const AttentionCase& attention(const Case& c) { return *attention_fields(c.payload); }
AttentionCase& attention(Case& c) { return *attention_fields(c.payload); }

// The same JSON with the schema a writer gives it today.
json as_written(json j) {
  j["schema"] = kCaseSchema;
  return j;
}

// Reading `j` fails with `code` and a message that names `field`.
void expect_error(const json& j, ErrorCode code, const std::string& field) {
  auto c = case_from_json(j);
  ASSERT_FALSE(c.ok()) << j.dump();
  EXPECT_EQ(to_string(c.error().code), to_string(code)) << c.error().message;
  EXPECT_NE(c.error().message.find(field), std::string::npos)
      << "message \"" << c.error().message << "\" does not name " << field;
}

// ---------------------------------------------------------------------------
// Round trips
// ---------------------------------------------------------------------------

TEST(CaseFile, MetadataRoundTrip) {
  auto c = case_from_json(base_case());
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(op_of(c.value()).name(), "metadata");
  EXPECT_EQ(batch(c.value()).q.segment_ids.shape, (Shape{1, 2, 4}));
  EXPECT_EQ(batch(c.value()).kv.segment_pos.shape, (Shape{2, 4}));
  EXPECT_EQ(batch(c.value()).window, (Window{2, -1}));
  EXPECT_EQ(batch(c.value()).mask, MaskKind::padding_causal);
  expect_same(c.value(), read_back(c.value(), "metadata.case.json"));
  EXPECT_EQ(case_to_json(c.value()), as_written(base_case()));
}

// A counterexample's record (property, backend, seed, drawn values) round-trips;
// schema 1 files read as before but cannot hold one.
TEST(CaseFile, PropertyRecordRoundTripsAndSchemaOneStillReads) {
  json j = as_written(base_case());
  j["property"] = json::parse(R"({"id": "metadata/trailingPaddingChangesNothing", "backend": "cpu",
      "backend_version": "v1", "seed": 18446744073709551615, "drawn": {"side": "kv", "pads": 3}})");
  auto c = case_from_json(j);
  ASSERT_TRUE(c.ok()) << c.error().message;
  ASSERT_TRUE(c->property.has_value());
  EXPECT_EQ(c->property->id, "metadata/trailingPaddingChangesNothing");
  EXPECT_EQ(c->property->seed, UINT64_MAX);
  EXPECT_EQ(c->property->drawn["pads"], 3);
  expect_same(c.value(), read_back(c.value(), "property.case.json"));
  EXPECT_EQ(case_to_json(c.value()), j);
  json v1 = j;
  v1["schema"] = kCaseSchemaV1;
  expect_error(v1, ErrorCode::bad_case, "property");
  v1.erase("property");
  EXPECT_TRUE(case_from_json(v1).ok());
  j["property"].erase("id");
  expect_error(j, ErrorCode::bad_case, "property.id");
  j["property"]["id"] = "x";
  j["property"]["drawn"] = 5;
  expect_error(j, ErrorCode::bad_case, "property.drawn");
}

// One CaseOp per payload alternative, in the variant's order, found by name and by payload.
TEST(CaseFile, EveryOpHasItsHome) {
  ASSERT_EQ(case_ops().size(), std::variant_size_v<CasePayload>);
  const auto op_at = [](auto index) { return &op_of(Case{CasePayload(std::in_place_index<index()>), {}, {}, {}}); };
  const std::vector<const CaseOp*> by_payload = [&]<size_t... I>(std::index_sequence<I...>) {
    return std::vector<const CaseOp*>{op_at(std::integral_constant<size_t, I>{})...};
  }(std::make_index_sequence<std::variant_size_v<CasePayload>>{});
  EXPECT_EQ(by_payload, case_ops());
  for (const CaseOp* op : case_ops()) EXPECT_EQ(find_case_op(op->name()), op);
  EXPECT_EQ(find_case_op("matmul"), nullptr);
}

TEST(CaseFile, AttentionSeedRoundTrip) {
  auto c = case_from_json(attention_case());
  ASSERT_TRUE(c.ok()) << c.error().message;
  const AttentionCase& a = attention(c.value());
  EXPECT_EQ(a.data_seed, std::optional<uint64_t>(7));
  EXPECT_EQ(a.problem.shape.dtype, Dtype::bf16);
  EXPECT_EQ(a.problem.shape.scale, std::optional<double>(0.25));
  EXPECT_TRUE(a.problem.shape.backward);
  expect_same(c.value(), read_back(c.value(), "seed.case.json"));
  auto inputs = attention_inputs(a);
  ASSERT_TRUE(inputs.ok());
  EXPECT_EQ(inputs.value(), generate_inputs(a.problem, 7));
}

TEST(CaseFile, AttentionTensorsRoundTripWithRealShapes) {
  Case c = case_from_json(attention_case()).value();
  AttentionCase& a = attention(c);
  a.data_seed.reset();
  a.tensors = generate_inputs(a.problem, 3);
  a.tensors->q[0] = 0.1;  // not a bf16 value: kept in the file, rounded for evaluation
  const json j = case_to_json(c);
  // [extra=1][B=2][Tq=4][Hq=2][D=3] and [1][2][Tkv=4][Hkv=1][3].
  EXPECT_EQ(j["tensors"]["q"].size(), 1u);
  EXPECT_EQ(j["tensors"]["q"][0][1][3][1].size(), 3u);
  EXPECT_EQ(j["tensors"]["k"][0][1][3].size(), 1u);
  EXPECT_EQ(j["tensors"]["do"][0].size(), 2u);
  EXPECT_FALSE(j.contains("data"));
  const Case back = read_back(c, "tensors.case.json");
  expect_same(c, back);
  EXPECT_EQ(attention(back).tensors->q[0], 0.1);
  EXPECT_EQ(attention_inputs(attention(back)).value().q[0], round_to_dtype(0.1, Dtype::bf16));
}

// Sharding cases (sharding_case.hpp) round-trip; a malformed mesh names the field.
TEST(CaseFile, ShardingCasesRoundTrip) {
  const json j = json::parse(R"({"schema": "attn-oracle.case/1", "op": "sharding", "note": "n",
      "mesh": [["fsdp", 2], ["context", 1]],
      "specs": {"q": ["fsdp", null, null, null], "k": ["fsdp", null, null, null],
                "v": [["fsdp", "context"], null, null, null], "segment_ids": ["fsdp", null]},
      "shapes": {"batch": 2, "q_len": 4, "kv_len": 4, "heads_q": 2, "heads_kv": 1, "head_dim": 8}})");
  auto c = case_from_json(j);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(op_of(c.value()).name(), "sharding");
  EXPECT_EQ(case_to_json(c.value()), as_written(j));
  EXPECT_EQ(case_to_json(read_back(c.value(), "sharding.case.json")), as_written(j));
  json bad = j;
  bad["mesh"] = {{"fsdp", 2}};
  const auto e = case_from_json(bad);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, ErrorCode::bad_case);
  EXPECT_NE(e.error().message.find("mesh"), std::string::npos) << e.error().message;
}

TEST(CaseFile, DefaultsAndDeferredValidation) {
  json j = base_case();
  j.erase("window");
  j.erase("note");
  j.erase("expected");
  j["max_segments"] = 0;
  auto c = case_from_json(j);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(batch(c.value()).window, (Window{-1, -1}));
  EXPECT_FALSE(c->expected.has_value());
  EXPECT_EQ(ref::metadata(batch(c.value())).error().code, ErrorCode::bad_max_segments);
  // A scalar reads as rank 0; the validator names the problem.
  j["max_segments"] = 2;
  j["q"]["segment_ids"] = 5;
  c = case_from_json(j);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(batch(c.value()).q.segment_ids.shape, Shape{});
  EXPECT_EQ(ref::metadata(batch(c.value())).error().code, ErrorCode::rank_mismatch);
}

TEST(CaseFile, WriteFailsOnBadPath) {
  const auto blocker = temp_path("blocker");
  std::filesystem::create_directories(blocker.parent_path());
  { std::ofstream(blocker.string()) << "x"; }
  EXPECT_FALSE(write_case_file((blocker / "x.case.json").string(), Case{}));
}

// ---------------------------------------------------------------------------
// Reading errors
// ---------------------------------------------------------------------------

TEST(CaseFile, BadCaseErrorsNameTheField) {
  expect_error(json::array(), ErrorCode::bad_case, "case");
  json j = base_case();
  j["schema"] = "attn-oracle.case/3";
  expect_error(j, ErrorCode::bad_case, "schema");
  j = base_case();
  j["op"] = "matmul";
  expect_error(j, ErrorCode::bad_case, "matmul");
  j = base_case();
  j["max_segments"] = 2.5;
  expect_error(j, ErrorCode::bad_case, "max_segments");
  j = base_case();
  j["windw"] = {0, 0};
  expect_error(j, ErrorCode::bad_case, "windw");
  j = base_case();
  j.erase("kv");
  expect_error(j, ErrorCode::bad_case, "kv");
  j = base_case();
  j["q"].erase("segment_pos");
  expect_error(j, ErrorCode::bad_case, "q.segment_pos");
  j = base_case();
  j.erase("mask");
  expect_error(j, ErrorCode::bad_case, "mask");
}

TEST(CaseFile, NestedArrayErrorsNameTheElement) {
  json j = base_case();
  j["kv"]["segment_ids"] = json::parse("[[1, 2, 2, 0], [1, 1, 0]]");
  expect_error(j, ErrorCode::bad_case, "kv.segment_ids[1]");
  j["kv"]["segment_ids"] = json::parse("[[1, 2, 2, 0], 7]");
  expect_error(j, ErrorCode::bad_case, "kv.segment_ids[1]");
  j["kv"]["segment_ids"] = json::parse("[[1, [2], 2, 0], [1, 1, 0, 0]]");
  expect_error(j, ErrorCode::bad_case, "kv.segment_ids[0][1]");
  j = base_case();
  j["q"]["segment_pos"][1][2] = 1.5;
  expect_error(j, ErrorCode::bad_case, "q.segment_pos[1][2]");
  j["q"]["segment_pos"][1][2] = "2";
  expect_error(j, ErrorCode::bad_case, "q.segment_pos[1][2]");
  j = base_case();
  j["q"]["segment_ids"][0][0][0] = std::numeric_limits<uint64_t>::max();
  expect_error(j, ErrorCode::bad_case, "q.segment_ids[0][0][0]");
}

TEST(CaseFile, MaskAndWindowErrors) {
  json j = base_case();
  j["mask"] = "diagonal";
  expect_error(j, ErrorCode::bad_mask, "diagonal");
  j["mask"] = 3;
  expect_error(j, ErrorCode::bad_mask, "mask");
  for (const char* window : {"[1]", "[1, 2, 3]", "\"wide\"", "[1, 2.5]", "[null, 1]"}) {
    j = base_case();
    j["window"] = json::parse(window);
    expect_error(j, ErrorCode::bad_window, "window");
  }
}

TEST(CaseFile, AttentionFieldErrors) {
  json j = attention_case();
  j["dtype"] = "fp8";
  expect_error(j, ErrorCode::bad_case, "dtype");
  j = attention_case();
  j["backward"] = "yes";
  expect_error(j, ErrorCode::bad_case, "backward");
  j = attention_case();
  j["data"]["seed"] = -1;
  expect_error(j, ErrorCode::bad_case, "data.seed");
  j = attention_case();
  j.erase("data");
  expect_error(j, ErrorCode::bad_case, "tensors");
  j = attention_case();
  j["heads_q"] = "2";
  expect_error(j, ErrorCode::bad_case, "heads_q");
}

TEST(CaseFile, TensorErrors) {
  Case c = case_from_json(attention_case()).value();
  attention(c).data_seed.reset();
  attention(c).tensors = generate_inputs(attention(c).problem, 1);
  const json good = case_to_json(c);
  json j = good;
  j["data"] = {{"seed", 1}};
  expect_error(j, ErrorCode::bad_case, "data, tensors");
  j = good;
  j["tensors"]["k"][0][1][2][0] = json::array({1.0, 2.0});
  expect_error(j, ErrorCode::bad_case, "tensors.k[0][1][2][0]");
  j = good;
  j["tensors"]["v"][0][0][0][0][1] = "x";
  expect_error(j, ErrorCode::bad_case, "tensors.v[0][0][0][0][1]");
  j = good;
  j["tensors"].erase("do");
  expect_error(j, ErrorCode::bad_case, "tensors.do");
  j = good;
  j["tensors"]["q"] = j["tensors"]["q"][0];  // drops the extra dim: same values, wrong shape
  expect_error(j, ErrorCode::bad_tensor_shape, "tensors.q");
}

TEST(CaseFile, FileErrors) {
  auto missing = read_case_file(temp_path("does_not_exist.case.json").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, ErrorCode::bad_case);
  const auto path = temp_path("not_json.case.json");
  std::filesystem::create_directories(path.parent_path());
  { std::ofstream(path.string()) << "{\"schema\": "; }
  auto bad = read_case_file(path.string());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, ErrorCode::bad_case);
}

// ---------------------------------------------------------------------------
// Result JSON
// ---------------------------------------------------------------------------

TEST(CaseFile, MetadataJsonHasBroadcastShapes) {
  auto c = case_from_json(base_case());
  auto md = ref::metadata(batch(c.value()));
  ASSERT_TRUE(md.ok()) << md.error().message;
  const json j = metadata_to_json(md.value());
  EXPECT_EQ(j["q_seqlens"].size(), 1u);
  EXPECT_EQ(j["q_seqlens"][0].size(), 2u);
  EXPECT_EQ(j["q_seqlens"][0][0].size(), 2u);
  EXPECT_EQ(j["kv_offsets"][0][1].size(), 3u);
  EXPECT_EQ(j["ragged_offsets_q"].back(), 8);
  EXPECT_EQ(j.size(), 8u);
}

TEST(CaseFile, AttentionJsonShapesAndMinusInfLse) {
  Case c = case_from_json(attention_case()).value();
  const AttentionProblem p = attention(c).problem;
  AttentionResult r;
  r.o.assign(1 * 2 * 4 * 2 * 3, 0.5);
  r.lse.assign(1 * 2 * 2 * 4, 1.0);
  r.lse[3] = -std::numeric_limits<double>::infinity();
  r.grads = AttentionGradients{r.o, std::vector<double>(24, 0.0), std::vector<double>(24, 0.0)};
  const json j = attention_result_to_json(p, r);
  EXPECT_EQ(j["o"][0][1][3][1].size(), 3u);       // [1][B][Tq][Hq][D]
  EXPECT_EQ(j["lse"][0][0][0].size(), 4u);        // [1][B][Hq][Tq]
  EXPECT_EQ(j["lse"][0][0][0][3], "-inf");
  EXPECT_EQ(j["dk"][0][1][3][0].size(), 3u);      // [1][B][Tkv][Hkv][D]
  EXPECT_TRUE(j.contains("dq") && j.contains("dv"));
  const json e = error_to_json(Error{ErrorCode::bad_heads, "m"});
  EXPECT_EQ(e, json::parse(R"({"error": {"code": "bad_heads", "message": "m"}})"));
}

}  // namespace
}  // namespace attn_oracle
