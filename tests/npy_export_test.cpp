// npy_export_test.cpp: `attn-oracle export --npy DIR` round trip. Runs the built
// CLI, reloads every .npy file with a reader of its own (NPY 1.0 as numpy
// writes it: magic, version, header dict, C-order little-endian data) and
// checks that each array has the shape and exactly the values of the case file
// it came from (generated tensors for data-seed cases, -inf for a null lse), and
// that the index lists every fixture.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <regex>
#include <sstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "attn_oracle/cases/case_file.hpp"

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Npy {
  std::string descr;
  std::vector<int64_t> shape;
  std::vector<double> values;  // int64 data widened (ids and lengths are small)
};

// Reads an NPY 1.0 file; fails the test and returns nullopt on anything unexpected.
std::optional<Npy> read_npy(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || bytes.compare(0, 8, std::string("\x93NUMPY\x01\x00", 8)) != 0) {
    ADD_FAILURE() << path << ": not NPY 1.0";
    return std::nullopt;
  }
  const size_t header_len = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9]) << 8;
  EXPECT_EQ((10 + header_len) % 64, 0u) << path << ": header not padded to 64 bytes";
  const std::string header = bytes.substr(10, header_len);
  std::smatch m;
  if (!std::regex_search(header, m, std::regex(R"(^\{'descr': '(<[if]8)', 'fortran_order': False, 'shape': \(([0-9, ]*)\), \} *\n$)"))) {
    ADD_FAILURE() << path << ": unexpected header " << header;
    return std::nullopt;
  }
  Npy npy{m[1], {}, {}};
  std::stringstream dims(m[2].str());
  for (std::string d; std::getline(dims, d, ',');)
    if (d.find_first_not_of(' ') != std::string::npos) npy.shape.push_back(std::stoll(d));
  int64_t count = 1;
  for (int64_t d : npy.shape) count *= d;
  const std::string data = bytes.substr(10 + header_len);
  if (data.size() != static_cast<size_t>(count) * 8) {
    ADD_FAILURE() << path << ": " << data.size() << " data bytes for " << count << " elements";
    return std::nullopt;
  }
  for (int64_t i = 0; i < count; ++i) {
    if (npy.descr == "<i8") {
      int64_t v;
      std::memcpy(&v, data.data() + 8 * i, 8);
      npy.values.push_back(static_cast<double>(v));
    } else {
      double v;
      std::memcpy(&v, data.data() + 8 * i, 8);
      npy.values.push_back(v);
    }
  }
  return npy;
}

// The nested array at a dotted path, flattened with its shape.
void flatten(const json& j, std::vector<int64_t>& shape, size_t depth, std::vector<double>& out) {
  if (!j.is_array()) {
    out.push_back(j.is_null() ? -std::numeric_limits<double>::infinity() : j.get<double>());
    return;
  }
  if (shape.size() == depth) shape.push_back(static_cast<int64_t>(j.size()));
  for (const json& e : j) flatten(e, shape, depth + 1, out);
}

const json& at_path(const json& j, const std::string& dotted) {
  const json* cur = &j;
  std::stringstream parts(dotted);
  for (std::string key; std::getline(parts, key, '.');) cur = &cur->at(key);
  return *cur;
}

// The case as the exporter must have seen it: data-seed tensors generated.
json case_json_with_tensors(const fs::path& path) {
  attn_oracle::Case c = attn_oracle::read_case_file(path.string()).value();
  attn_oracle::AttentionCase* a = attn_oracle::attention_fields(c.payload);
  if (a && a->data_seed) {
    auto inputs = attn_oracle::attention_inputs(*a);
    if (inputs) {  // an invalid problem keeps its seed: there is nothing to generate
      a->tensors = inputs.value();
      a->data_seed.reset();
    }
  }
  return attn_oracle::case_to_json(c);
}

// ctest runs each test of this file as its own process, two at a time, so every
// process exports into its own directory; a failed export fails the test (a fatal
// failure in SetUpTestSuite would only mark the tests skipped).
class NpyExport : public testing::Test {
 protected:
  void SetUp() override {
    static const std::optional<std::string> failure = export_once();
    if (failure) FAIL() << *failure;
  }
  static std::optional<std::string> export_once() {
    dir_ = fs::temp_directory_path() / ("attn_oracle_npy_export_test_" + std::to_string(getpid()));
    fs::remove_all(dir_);
    const std::string command = std::string("'") + ATTN_ORACLE_CLI + "' export --npy '" + dir_.string() + "' >/dev/null";
    const int status = std::system(command.c_str());
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "failed: " + command;
    std::ifstream in(dir_ / "index.json");
    index_ = json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (index_.is_discarded()) return "no readable index.json from: " + command;
    return std::nullopt;
  }
  static inline fs::path dir_;
  static inline json index_;
};

TEST_F(NpyExport, IndexListsEveryFixture) {
  size_t cases = 0;
  for (const auto& e : fs::recursive_directory_iterator(ATTN_ORACLE_FIXTURES_DIR))
    cases += e.path().string().ends_with(".case.json");
  EXPECT_EQ(index_.at("schema"), "attn-oracle.npy-index/1");
  EXPECT_EQ(index_.at("fixtures").size(), cases);
}

TEST_F(NpyExport, EveryArrayReloadsToTheCaseFileValues) {
  size_t arrays = 0;
  for (const json& f : index_.at("fixtures")) {
    const std::string name = f.at("name");
    ASSERT_FALSE(f.contains("unreadable")) << name;
    const json c = case_json_with_tensors(fs::path(ATTN_ORACLE_FIXTURES_DIR) / (name + ".case.json"));
    for (const char* group : {"inputs", "expected"})
      for (auto it = f.at(group).begin(); it != f.at(group).end(); ++it) {
        SCOPED_TRACE(name + ": " + it.key());
        std::vector<int64_t> shape;
        std::vector<double> want;
        flatten(at_path(c, it.key()), shape, 0, want);
        const auto npy = read_npy(dir_ / it.value().at("file").get<std::string>());
        ASSERT_TRUE(npy.has_value());
        EXPECT_EQ(npy->shape, shape);
        EXPECT_EQ(it.value().at("shape").get<std::vector<int64_t>>(), shape);
        ASSERT_EQ(npy->values.size(), want.size());
        for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(npy->values[i], want[i]) << "element " << i;
        ++arrays;
      }
    if (c.contains("expected") && c["expected"].contains("error")) {
      EXPECT_EQ(f.at("expected_error"), c["expected"]["error"]["code"]) << name;
    }
  }
  EXPECT_GT(arrays, 100u);
}

TEST_F(NpyExport, AttentionFixturesCarryTheirTensors) {
  for (const json& f : index_.at("fixtures"))
    if (f.at("op") == "attention") {
      EXPECT_TRUE(f.at("inputs").contains("tensors.q")) << f.at("name");
      EXPECT_TRUE(f.at("inputs").contains("tensors.v")) << f.at("name");
    }
}

}  // namespace
