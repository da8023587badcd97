// devices_test.cpp: one worker per device (harness/devices.hpp) with fake device
// lists, no GPU needed:
//  - --devices over an outer CUDA_VISIBLE_DEVICES indexes its list; without
//    one, devices pass as written (UUIDs too); errors name the entry;
//  - ctest's allocation (CTEST_RESOURCE_GROUP_*) over an outer list;
//  - `check --devices 0,1` runs a child per device, each seeing its device
//    alone, and merges them into the totals of one unsharded run.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "attn_oracle/harness/devices.hpp"

namespace attn_oracle {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> assigned(const std::string& devices, const char* outer) {
  const auto a = device_assignment(devices, outer);
  return a ? a.value() : std::vector<std::string>{"error: " + a.error().message};
}

TEST(Devices, AnOuterListIsIndexedNeverBypassed) {
  EXPECT_EQ(assigned("0,1", nullptr), (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(assigned("0,1", ""), (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(assigned("1,0", "3,5"), (std::vector<std::string>{"5", "3"}));
  EXPECT_EQ(assigned("GPU-8f2c,GPU-77aa", nullptr), (std::vector<std::string>{"GPU-8f2c", "GPU-77aa"}));
  EXPECT_EQ(assigned("0", "GPU-8f2c"), (std::vector<std::string>{"GPU-8f2c"}));
  EXPECT_EQ(assigned("2", "3,5"),
            std::vector<std::string>{"error: --devices 2: device 2: CUDA_VISIBLE_DEVICES=3,5 makes 2 devices visible, "
                                     "indices 0 to 1"});
  EXPECT_EQ(assigned("0,0", nullptr), std::vector<std::string>{"error: --devices 0,0: device 0 is listed twice"});
  EXPECT_EQ(assigned("0,", nullptr), std::vector<std::string>{"error: --devices 0,: an empty entry"});
  EXPECT_EQ(assigned("99999999999", "3").front().substr(0, 6), "error:");
}

std::string allocation(const Environment& env) {
  const auto a = ctest_gpu_allocation(env);
  if (!a) return "error: " + a.error().message;
  return a.value().value_or("none");
}

TEST(Devices, CtestsAllocationOverTheOuterList) {
  EXPECT_EQ(allocation({}), "none");
  EXPECT_EQ(allocation({{"CTEST_RESOURCE_GROUP_COUNT", "1"}, {"CTEST_RESOURCE_GROUP_0_GPUS", "id:1,slots:1"}}), "1");
  EXPECT_EQ(allocation({{"CTEST_RESOURCE_GROUP_COUNT", "2"},
                        {"CTEST_RESOURCE_GROUP_0_GPUS", "id:1,slots:1"},
                        {"CTEST_RESOURCE_GROUP_1_GPUS", "id:0,slots:1"},
                        {"CUDA_VISIBLE_DEVICES", "4,6"}}),
            "6,4");
  EXPECT_EQ(allocation({{"CTEST_RESOURCE_GROUP_COUNT", "1"}, {"CTEST_RESOURCE_GROUP_0_CPUS", "id:0,slots:1"}}), "none");
  EXPECT_EQ(allocation({{"CTEST_RESOURCE_GROUP_COUNT", "1"},
                        {"CTEST_RESOURCE_GROUP_0_GPUS", "id:3,slots:1"},
                        {"CUDA_VISIBLE_DEVICES", "4,6"}}),
            "error: CTEST_RESOURCE_GROUP_0_GPUS=id:3,slots:1: device 3: CUDA_VISIBLE_DEVICES=4,6 makes 2 devices "
            "visible, indices 0 to 1");
}

std::string run(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  return pclose(p) == 0 ? out : "exit != 0\n" + out;
}

nlohmann::json report(const fs::path& dir) {
  std::ifstream in(dir / "conformance.json");
  return nlohmann::json::parse(in);
}

TEST(Devices, ACheckPerDeviceMergesToTheTotalsOfOneRun) {
  const fs::path dir = fs::temp_directory_path() / "attn_oracle_devices_test";
  fs::remove_all(dir);
  const std::string check = std::string("CUDA_VISIBLE_DEVICES=7,3,5 ") + ATTN_ORACLE_CLI +
                            " check --backend reference --filter metadata/matchesReference,metadata/rowsAreIndependent"
                            " --cases 30 --no-store --no-isolation";
  const std::string out = run(check + " --devices 2,0 --junit-xml " + (dir / "junit.xml").string() + " --report " +
                              (dir / "devices").string() + " 2>&1");
  ASSERT_EQ(out.find("exit != 0"), std::string::npos) << out;
  EXPECT_NE(out.find("attn-oracle check on 2 devices: 0 (CUDA_VISIBLE_DEVICES=5) 1 (CUDA_VISIBLE_DEVICES=7)"),
            std::string::npos) << out;
  // Each child saw its device alone and drew its shard.
  for (const auto& [part, device, shard] : {std::tuple{"device-0", "5", "1/2"}, std::tuple{"device-1", "7", "2/2"}}) {
    std::ifstream in(dir / "devices" / part / "output.txt");
    const std::string said((std::istreambuf_iterator<char>(in)), {});
    EXPECT_NE(said.find(std::string("  CUDA_VISIBLE_DEVICES=") + device + "\n"), std::string::npos) << said;
    EXPECT_NE(said.find(std::string("shard ") + shard), std::string::npos) << said;
  }
  ASSERT_EQ(run(check + " --report " + (dir / "one").string() + " >/dev/null 2>&1"), "");
  const nlohmann::json merged = report(dir / "devices"), one = report(dir / "one");
  ASSERT_EQ(merged["results"].size(), one["results"].size());
  for (size_t i = 0; i < one["results"].size(); ++i) {
    EXPECT_EQ(merged["results"][i]["draws"]["total"], 30);
    EXPECT_EQ(merged["results"][i]["draws"], one["results"][i]["draws"]) << one["results"][i]["id"];
  }
  EXPECT_TRUE(fs::exists(dir / "junit.xml"));
  EXPECT_NE(run(check + " --devices 0,0 2>&1").find("device 0 is listed twice"), std::string::npos);
  EXPECT_NE(run(check + " --devices 0 --shard 1/2 2>&1").find("give it or --shard"), std::string::npos);
}

}  // namespace
}  // namespace attn_oracle
