// case_file.cpp: the case-file envelope (schema, op, note, property, expected)
// and the writer's layout. Each op's own fields are read and
// written by its CaseOp (case_op.hpp).
// Tested by tests/case_file_test.cpp (round trips, every error path) and
// tests/fixtures_test.cpp (every fixture replays to its `expected`).
#include "attn_oracle/cases/case_file.hpp"

#include "attn_oracle/model/memory_budget.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "attn_oracle/cases/case_op.hpp"
#include "case_json.hpp"

namespace attn_oracle::inline cases {
namespace {

using nlohmann::json;
using case_json::fail;
using case_json::required;

// ---------------------------------------------------------------------------
// The envelope
// ---------------------------------------------------------------------------

const CaseOp& parse_op(const json& j) {
  const json& op = required(j, "op");
  if (op.is_string())
    if (const CaseOp* found = find_case_op(op.get<std::string>())) return *found;
  std::string names;
  for (const CaseOp* o : case_ops()) names += (names.empty() ? "" : ", ") + std::string(o->name());
  fail("op: unknown op " + op.dump() + " (expected " + names + ")");
}

std::string string_field(const json& v, const std::string& path) {
  if (!v.is_string()) fail(path + ": expected a string, found " + v.dump());
  return v.get<std::string>();
}

PropertyRecord parse_property(const json& j) {
  if (!j.is_object()) fail("property: expected an object with id, backend, seed and drawn");
  case_json::reject_unknown_keys(j, {"id", "backend", "backend_version", "seed", "drawn"}, "property.");
  PropertyRecord p;
  p.id = string_field(required(j, "id", "property."), "property.id");
  if (auto it = j.find("backend"); it != j.end()) p.backend = string_field(*it, "property.backend");
  if (auto it = j.find("backend_version"); it != j.end()) p.backend_version = string_field(*it, "property.backend_version");
  if (auto it = j.find("seed"); it != j.end()) p.seed = case_json::seed_field(*it, "property.seed");
  if (auto it = j.find("drawn"); it != j.end()) {
    if (!it->is_object()) fail("property.drawn: expected an object, found " + it->dump());
    p.drawn = *it;
  }
  return p;
}

json property_to_json(const PropertyRecord& p) {
  json j = {{"id", p.id}, {"seed", p.seed}, {"drawn", p.drawn}};
  if (!p.backend.empty()) j["backend"] = p.backend;
  if (!p.backend_version.empty()) j["backend_version"] = p.backend_version;
  return j;
}

Case parse_case(const json& j) {
  if (!j.is_object()) fail("case: expected a JSON object");
  const json& schema = required(j, "schema");
  if (schema != kCaseSchema && schema != kCaseSchemaV1)
    fail("schema: expected \"" + std::string(kCaseSchema) + "\" (or \"" + kCaseSchemaV1 + "\"), found " + schema.dump());
  const CaseOp& op = parse_op(j);
  Case c{op.read(j), {}, {}, {}};
  if (auto it = j.find("note"); it != j.end()) c.note = string_field(*it, "note");
  if (auto it = j.find("property"); it != j.end()) {
    if (schema == kCaseSchemaV1) fail("property: not part of " + std::string(kCaseSchemaV1));
    c.property = parse_property(*it);
  }
  if (auto it = j.find("expected"); it != j.end()) c.expected = *it;
  return c;
}

// ---------------------------------------------------------------------------
// Writing: one key per line in a fixed order, arrays of numbers on one line.
// ---------------------------------------------------------------------------

constexpr std::string_view kKeyOrder[] = {
    "schema", "op", "note", "mesh", "specs", "shapes", "mask", "window", "max_segments", "doc_lengths",
    "micro_seq_tokens", "heads_q", "heads_kv", "head_dim", "dtype", "scale", "backward", "q", "kv", "data",
    "tensors", "property", "expected"};

void write_pretty(std::ostream& os, const json& j, int indent);

void write_object(std::ostream& os, const json& j, int indent) {
  std::vector<std::string> keys;
  for (std::string_view k : kKeyOrder)
    if (j.contains(std::string(k))) keys.emplace_back(k);
  for (auto it = j.begin(); it != j.end(); ++it)
    if (std::find(std::begin(kKeyOrder), std::end(kKeyOrder), it.key()) == std::end(kKeyOrder)) keys.push_back(it.key());
  const std::string pad(indent + 2, ' ');
  os << "{\n";
  for (size_t i = 0; i < keys.size(); ++i) {
    os << pad << json(keys[i]).dump() << ": ";
    write_pretty(os, j[keys[i]], indent + 2);
    os << (i + 1 < keys.size() ? ",\n" : "\n");
  }
  os << std::string(indent, ' ') << "}";
}

// Arrays and objects of scalars on one line: `[1, 1, 0]`, `{"code": "bad_mask"}`.
void write_inline(std::ostream& os, const json& j) {
  const auto dump = [](const json& x) { return x.dump(-1, ' ', false, json::error_handler_t::replace); };
  if (!j.is_structured() || j.empty()) {
    os << dump(j);
    return;
  }
  os << (j.is_array() ? "[" : "{");
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it != j.begin()) os << ", ";
    if (j.is_object()) os << dump(it.key()) << ": ";
    os << dump(it.value());
  }
  os << (j.is_array() ? "]" : "}");
}

void write_pretty(std::ostream& os, const json& j, int indent) {
  const bool nested =
      j.is_structured() && std::any_of(j.begin(), j.end(), [](const json& e) { return e.is_structured(); });
  if (!nested) return write_inline(os, j);
  if (j.is_object()) return write_object(os, j, indent);
  const std::string pad(indent + 2, ' ');
  os << "[\n";
  for (size_t i = 0; i < j.size(); ++i) {
    os << pad;
    write_pretty(os, j[i], indent + 2);
    os << (i + 1 < j.size() ? ",\n" : "\n");
  }
  os << std::string(indent, ' ') << "]";
}

}  // namespace

Expected<Case> case_from_json(const json& j) {
  try {
    return parse_case(j);
  } catch (const case_json::CaseFieldError& e) {
    return e.error;
  } catch (const std::exception& e) {
    return Error{ErrorCode::bad_case, std::string("case: ") + e.what()};
  }
}

// Measured: nlohmann::json holds a file of small integers in about 10x its text.
constexpr int64_t kJsonBytesPerTextByte = 12;

Expected<Case> read_case_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Error{ErrorCode::bad_case, path + ": cannot open the file"};
  // A parsed JSON value takes several times its text (a number is a 16-byte
  // node in a vector); refused before reading, like every other allocation.
  std::error_code size_error;
  const uintmax_t bytes = std::filesystem::file_size(path, size_error);
  if (!size_error) {
    MemoryNeed need;
    need.add("the parsed JSON of a " + std::to_string(bytes) + "-byte case file", {static_cast<int64_t>(std::min<uintmax_t>(bytes, INT64_MAX / kJsonBytesPerTextByte)), kJsonBytesPerTextByte});
    if (auto e = need.check("reading " + path)) return *e;
  }
  try {
    return case_from_json(json::parse(in));
  } catch (const std::exception& e) {
    return Error{ErrorCode::bad_case, path + ": not valid JSON: " + e.what()};
  }
}

json case_to_json(const Case& c) {
  const CaseOp& op = op_of(c);
  json j = {{"schema", kCaseSchema}, {"op", std::string(op.name())}};
  if (!c.note.empty()) j["note"] = c.note;
  j.update(op.write(c.payload));
  if (c.property) j["property"] = property_to_json(*c.property);
  if (c.expected) j["expected"] = *c.expected;
  return j;
}

bool write_case_file(const std::string& path, const Case& c) {
  try {
    const std::filesystem::path p(path);
    if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
    std::ofstream out(p);
    if (!out) return false;
    write_pretty(out, case_to_json(c), 0);
    out << "\n";
    out.close();
    return static_cast<bool>(out);
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace attn_oracle::cases
