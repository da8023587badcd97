// readme_coverage_test.cpp: the coverage table in README.md (between the
// coverage markers) is exactly what `attn-oracle coverage --markdown` generates
// from the property registry, so it cannot drift from what the suite runs.
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

namespace {

std::string command_output(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return out;
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  pclose(pipe);
  return out;
}

TEST(ReadmeCoverage, TableIsTheGeneratedOne) {
  std::ifstream in(std::string(ATTN_ORACLE_FIXTURES_DIR) + "/../README.md");
  std::stringstream readme;
  readme << in.rdbuf();
  const std::string text = readme.str(), begin = "<!-- coverage:begin -->\n", end = "<!-- coverage:end -->";
  const size_t from = text.find(begin), to = text.find(end);
  ASSERT_NE(from, std::string::npos) << "README.md has no " << begin;
  ASSERT_NE(to, std::string::npos) << "README.md has no " << end;
  const std::string in_readme = text.substr(from + begin.size(), to - from - begin.size());
  const std::string generated = command_output(std::string("'") + ATTN_ORACLE_CLI + "' coverage --markdown");
  ASSERT_FALSE(generated.empty());
  EXPECT_EQ(in_readme, generated) << "regenerate the table: scripts/attn-oracle coverage --markdown, "
                                     "and paste it between the coverage markers of README.md";
}

}  // namespace
