// coverage.cpp: tallies the cases the properties pass (coverage.hpp).
#include "coverage.hpp"

#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "attn_oracle/property_runner.hpp"

namespace attn_oracle {
namespace {

// Layout words in the order the table prints them.
constexpr const char* kLayouts[] = {"B=1", "B>1", "extra dims", "Tq!=Tkv", "window", "GQA"};

struct Cell {
  std::set<std::string> properties, layouts, dtypes;
};
using Tally = std::map<std::pair<int, int>, Cell>;  // (op, mask kind) -> what was seen

void tally(const Case& c, const std::string& property, Tally& t) {
  Cell& cell = t[{static_cast<int>(c.op), static_cast<int>(c.batch.mask)}];
  cell.properties.insert(property);
  const Shape& ids = c.batch.q.segment_ids.shape;
  if (ids.size() >= 2) cell.layouts.insert(ids[ids.size() - 2] == 1 ? "B=1" : "B>1");
  if (ids.size() > 2 || c.batch.kv.segment_ids.shape.size() > 2) cell.layouts.insert("extra dims");
  if (!ids.empty() && !c.batch.kv.segment_ids.shape.empty() && ids.back() != c.batch.kv.segment_ids.shape.back())
    cell.layouts.insert("Tq!=Tkv");
  if (c.batch.window.left >= 0 || c.batch.window.right >= 0) cell.layouts.insert("window");
  if (c.op == CaseOp::attention || c.op == CaseOp::small_seq) {
    if (c.attention.heads_q != c.attention.heads_kv) cell.layouts.insert("GQA");
    cell.dtypes.insert(std::string(to_string(c.attention.dtype)) + (c.attention.backward ? " fwd+bwd" : " fwd"));
  }
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

std::string ordered_layouts(const std::set<std::string>& seen) {
  std::string out;
  for (const char* l : kLayouts)
    if (seen.count(l)) out += (out.empty() ? "" : ", ") + std::string(l);
  return out.empty() ? "-" : out;
}

}  // namespace

std::string coverage_table(bool markdown) {
  Tally t;
  RunSettings settings;
  settings.max_success = kCoverageCasesPerProperty;
  settings.seed = kCoverageSeed;
  settings.quiet = true;
  settings.failures_dir = (std::filesystem::temp_directory_path() / "attn-oracle-coverage").string();
  std::string current;
  settings.on_case_passed = [&](const Case& c) { tally(c, current, t); };
  for (const PropertyDef& p : all_properties()) {
    auto backend = backend_for(p);
    if (!backend) continue;
    current = p.id;
    run_property(p, *backend, settings);
  }
  std::ostringstream os;
  if (markdown) os << "| op | mask | layouts | dtypes | properties |\n|---|---|---|---|---|\n";
  for (const auto& [key, cell] : t) {
    const std::string op(to_string(static_cast<CaseOp>(key.first)));
    const std::string mask(to_string(static_cast<MaskKind>(key.second)));
    if (markdown)
      os << "| " << op << " | " << mask << " | " << ordered_layouts(cell.layouts) << " | "
         << joined(cell.dtypes, ", ") << " | " << cell.properties.size() << " |\n";
    else
      os << op << "\t" << mask << "\t" << ordered_layouts(cell.layouts) << "\t" << joined(cell.dtypes, ", ")
         << "\t" << joined(cell.properties, " ") << "\n";
  }
  return os.str();
}

}  // namespace attn_oracle
