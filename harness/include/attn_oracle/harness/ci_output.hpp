// ci_output.hpp: a check report in the forms CI systems read (docs/ci.md).
//
//  - junit_xml: JUnit XML, which GitHub Actions (test reporters), GitLab
//    (artifacts:reports:junit), Jenkins and Buildkite show as tests: one
//    <testsuite> per backend, one <testcase> per property, a <failure> per
//    distinct failure holding its shrunk case, replay and repro lines, a
//    <skipped> with the reason. An expected failure is a <skipped> saying so; an
//    unexpected pass (XPASS) is a <failure>.
//  - github_annotations: GitHub Actions workflow commands, one `::error` line
//    per distinct failure naming its case file (shown on the run's summary and,
//    for a file in the repository, on the file), `::warning` per report warning.
//
// Apart from the times, the same report gives the same bytes.
#pragma once

#include <string>
#include <vector>

#include "attn_oracle/harness/check.hpp"
#include "attn_oracle/harness/report.hpp"

namespace attn_oracle::inline harness {

std::string junit_xml(const CheckReport& report);
// `relative_to`: case paths under this directory are written relative to it (the
// workspace GitHub resolves `file=` against); "" keeps them as they are.
std::vector<std::string> github_annotations(const CheckReport& report, const std::string& relative_to);

// What check's --junit-xml FILE and --github-annotations ask for (annotations on
// stdout, relative to the working directory); false, with `error` set, when the
// file cannot be written.
bool write_ci_output(const CheckReport& report, const CheckOptions& options, std::string& error);

}  // namespace attn_oracle::harness
