// npy_export.cpp: fixtures as .npy files plus an index (npy_export.hpp).
#include "attn_oracle/harness/npy_export.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>

#include "attn_oracle/cases/case_file.hpp"
#include "attn_oracle/cases/case_op.hpp"

namespace attn_oracle::inline harness {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using ojson = nlohmann::ordered_json;

// A rectangular nested array of numbers (nulls allowed), flattened.
struct NumericArray {
  std::vector<int64_t> shape;
  std::vector<const json*> leaves;
  bool all_integers = true;
};

bool flatten(const json& j, size_t depth, NumericArray& a) {
  if (!j.is_array()) {
    if (depth != a.shape.size() || !(j.is_number() || j.is_null())) return false;
    a.all_integers = a.all_integers && j.is_number_integer();
    a.leaves.push_back(&j);
    return true;
  }
  if (depth == a.shape.size()) a.shape.push_back(static_cast<int64_t>(j.size()));
  else if (depth > a.shape.size() || a.shape[depth] != static_cast<int64_t>(j.size())) return false;
  for (const json& e : j)
    if (!flatten(e, depth + 1, a)) return false;
  return true;
}

std::optional<NumericArray> numeric_array(const json& j) {
  NumericArray a;
  if (!j.is_array() || !flatten(j, 0, a)) return std::nullopt;
  if (a.leaves.size() != static_cast<size_t>(shape_product(a.shape))) return std::nullopt;  // ragged
  return a;
}

template <class T>
void append_le(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // every supported host is little-endian
  out.append(bytes, sizeof(T));
}

std::string element_bytes(const NumericArray& a) {
  std::string out;
  for (const json* leaf : a.leaves) {
    if (a.all_integers) append_le<int64_t>(out, leaf->get<int64_t>());
    else append_le<double>(out, leaf->is_null() ? -std::numeric_limits<double>::infinity() : leaf->get<double>());
  }
  return out;
}

// Writes one array; returns its index entry.
ojson write_array(const NumericArray& a, const fs::path& root, const std::string& relative) {
  const std::string descr = a.all_integers ? "<i8" : "<f8";
  std::ofstream(root / relative, std::ios::binary) << npy_bytes(descr, a.shape, element_bytes(a));
  return {{"file", relative}, {"dtype", a.all_integers ? "int64" : "float64"}, {"shape", a.shape}};
}

// Every numeric array below `j` (objects walked by key), named by its dotted path.
void collect_arrays(const json& j, const std::string& path, std::vector<std::pair<std::string, NumericArray>>& out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it)
      collect_arrays(it.value(), path.empty() ? it.key() : path + "." + it.key(), out);
  } else if (auto a = numeric_array(j)) {
    out.emplace_back(path, std::move(*a));
  }
}

// The case as JSON, with generated tensors in place of a data seed.
json case_with_tensors(const Case& c) {
  Case filled = c;
  if (AttentionCase* a = attention_fields(filled.payload); a && a->data_seed) {
    if (auto inputs = attention_inputs(*a)) {
      a->tensors = inputs.value();
      a->data_seed.reset();
    }
  }
  return case_to_json(filled);
}

std::optional<uint64_t> data_seed(const Case& c) {
  if (const AttentionCase* a = attention_fields(c.payload)) return a->data_seed;
  if (const auto* k = c.as<KvBufferCase>()) return k->data_seed;
  return std::nullopt;
}

ojson export_fixture(const fs::path& case_path, const std::string& name, const fs::path& out_root) {
  ojson entry;
  entry["name"] = name;
  auto c = read_case_file(case_path.string());
  if (!c) {
    entry["unreadable"] = std::string(to_string(c.error().code)) + ": " + c.error().message;
    return entry;
  }
  json j = case_with_tensors(c.value());
  entry["op"] = std::string(op_of(c.value()).name());
  entry["note"] = c->note;
  if (auto seed = data_seed(c.value())) entry["data_seed"] = *seed;
  ojson attributes = ojson::object(), inputs = ojson::object(), expected = ojson::object();
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!it.value().is_object() && (!it.value().is_array() || it.key() == "window") && it.key() != "note" &&
        it.key() != "schema")
      attributes[it.key()] = it.value();
  entry["attributes"] = attributes;
  fs::create_directories(out_root / name);
  const json expected_json = j.contains("expected") ? j["expected"] : json();
  j.erase("expected");
  j.erase("window");
  j.erase("property");  // a counterexample's record: not an input
  std::vector<std::pair<std::string, NumericArray>> arrays, results;
  collect_arrays(j, "", arrays);
  collect_arrays(expected_json, "expected", results);
  for (auto& [path, a] : arrays) inputs[path] = write_array(a, out_root, name + "/" + path + ".npy");
  for (auto& [path, a] : results) expected[path] = write_array(a, out_root, name + "/" + path + ".npy");
  entry["inputs"] = inputs;
  entry["expected"] = expected;
  if (expected_json.is_object() && expected_json.contains("error"))
    entry["expected_error"] = expected_json["error"].value("code", "");
  return entry;
}

}  // namespace

std::string npy_bytes(const std::string& descr, const std::vector<int64_t>& shape, const std::string& data) {
  std::string dims;  // "3," for one dimension, "2, 3" for more, "" for a scalar
  for (size_t i = 0; i < shape.size(); ++i) dims += (i ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  const size_t unpadded = 10 + header.size() + 1;  // magic, version, length, header, '\n'
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY\x01\x00", 8);
  append_le<uint16_t>(out, static_cast<uint16_t>(header.size()));
  out.append(header);
  out.append(data);
  return out;
}

int export_npy(const std::string& fixtures_dir, const std::string& out_dir) {
  std::vector<fs::path> cases;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(fixtures_dir, ec); !ec && it != fs::end(it); it.increment(ec))
    if (it->is_regular_file() && it->path().string().ends_with(".case.json")) cases.push_back(it->path());
  if (ec || cases.empty()) {
    std::cerr << "attn-oracle export: no *.case.json under " << fixtures_dir << "\n";
    return 1;
  }
  std::sort(cases.begin(), cases.end());
  ojson index;
  index["schema"] = "attn-oracle.npy-index/1";
  index["fixtures"] = ojson::array();
  for (const fs::path& p : cases) {
    std::string name = fs::relative(p, fixtures_dir).generic_string();
    name.resize(name.size() - std::string(".case.json").size());
    index["fixtures"].push_back(export_fixture(p, name, out_dir));
  }
  std::ofstream out(fs::path(out_dir) / "index.json");
  if (!(out << index.dump(2) << "\n")) {
    std::cerr << "attn-oracle export: cannot write " << out_dir << "/index.json\n";
    return 1;
  }
  std::cout << cases.size() << " fixtures exported to " << out_dir << "\n";
  return 0;
}

}  // namespace attn_oracle::harness
