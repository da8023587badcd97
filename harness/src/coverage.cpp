// coverage.cpp: tallies the cases the properties pass (coverage.hpp).
#include "attn_oracle/harness/coverage.hpp"

#include <filesystem>
#include <map>
#include <set>
#include <tuple>
#include <sstream>

#include "attn_oracle/cases/case_op.hpp"
#include "attn_oracle/runner/property_runner.hpp"

namespace attn_oracle::inline harness {
namespace {

// Layout words of the packed-batch ops in the order the table prints them; an
// op's other words follow in alphabetical order.
constexpr const char* kLayouts[] = {"B=1", "B>1", "extra dims", "Tq!=Tkv", "window", "GQA"};

struct Cell {
  std::set<std::string> properties, layouts, dtypes;
};
// (op in table order, mask kinds in the order of docs/semantics.md#2-the-attention-mask then other
// rows, row) -> what was seen
using Tally = std::map<std::tuple<size_t, int, std::string>, Cell>;

int row_rank(const std::string& row) {
  const auto kind = mask_kind_from_string(row);
  return kind ? static_cast<int>(*kind) : 100;
}

void tally(const Case& c, const std::string& property, Tally& t) {
  const CoverageCell seen = op_of(c).coverage(c.payload);
  Cell& cell = t[{c.payload.index(), row_rank(seen.row), seen.row}];
  cell.properties.insert(property);
  cell.layouts.insert(seen.layouts.begin(), seen.layouts.end());
  cell.dtypes.insert(seen.dtypes.begin(), seen.dtypes.end());
}

// The first registered backend with every capability `p` needs.
std::unique_ptr<Backend> backend_for(const PropertyDef& p) {
  for (const std::string& name : BackendRegistry::instance().names()) {
    auto b = BackendRegistry::instance().make(name);
    if (b->has(p.needs) && (!p.also_needs || b->has(*p.also_needs))) return b;
  }
  return nullptr;
}

std::string joined(const std::set<std::string>& s, const char* sep) {
  std::string out;
  for (const std::string& x : s) out += (out.empty() ? "" : sep) + x;
  return out.empty() ? "-" : out;
}

std::string ordered_layouts(std::set<std::string> seen) {
  std::string out;
  for (const char* l : kLayouts)
    if (seen.erase(l)) out += (out.empty() ? "" : ", ") + std::string(l);
  for (const std::string& l : seen) out += (out.empty() ? "" : ", ") + l;
  return out.empty() ? "-" : out;
}

}  // namespace

std::string coverage_table(bool markdown) {
  Tally t;
  RunSettings settings;
  settings.cases = kCoverageCasesPerProperty;
  settings.seed = kCoverageSeed;
  settings.failures_dir = (std::filesystem::temp_directory_path() / "attn-oracle-coverage").string();
  struct Tallying : RunListener {
    Tally* t;
    std::string current;
    void case_passed(const Case& c) override { tally(c, current, *t); }
  } tallying;
  tallying.t = &t;
  // property -> "edge ..." / "rule ..." label -> passing draws (independent_rules.hpp)
  std::map<std::string, std::map<std::string, int>> edges;
  for (const PropertyDef& p : all_properties()) {
    auto backend = backend_for(p);
    if (!backend) continue;
    tallying.current = p.id;
    const PropertyOutcome o = run_property(p, *backend, settings, &tallying);
    for (const auto& [key, n] : o.mix)
      for (const char* prefix : {"label edge ", "label rule "})
        if (key.rfind(prefix, 0) == 0) edges[p.id][key.substr(6)] = n;
  }
  std::ostringstream os;
  if (markdown) os << "| op | mask | layouts | dtypes | properties |\n|---|---|---|---|---|\n";
  for (const auto& [key, cell] : t) {
    const std::string op(case_ops()[std::get<0>(key)]->name());
    const std::string& mask = std::get<2>(key);
    if (markdown)
      os << "| " << op << " | " << mask << " | " << ordered_layouts(cell.layouts) << " | "
         << joined(cell.dtypes, ", ") << " | " << cell.properties.size() << " |\n";
    else
      os << op << "\t" << mask << "\t" << ordered_layouts(cell.layouts) << "\t" << joined(cell.dtypes, ", ")
         << "\t" << joined(cell.properties, " ") << "\n";
  }
  if (!markdown) {
    os << "\nvalidity-rule edges and rules drawn (passing draws of " << kCoverageCasesPerProperty << " per property):\n";
    for (const auto& [property, labels] : edges)
      for (const auto& [label, n] : labels) os << property << "\t" << label << "\t" << n << "\n";
  }
  return os.str();
}

}  // namespace attn_oracle::harness
