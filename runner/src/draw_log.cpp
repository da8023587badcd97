// draw_log.cpp: see draw_log.hpp.
#include "attn_oracle/runner/draw_log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include "attn_oracle/cases/case_file.hpp"
#include "attn_oracle/runner/run_outcome.hpp"
#include "attn_oracle/cases/case_summary.hpp"

namespace attn_oracle::inline runner {

nlohmann::ordered_json observation_json(const DrawObservation& o) {
  nlohmann::ordered_json features = nlohmann::ordered_json::object(), arguments = {{"draw", o.draw}};
  std::string representation;
  if (o.drawn) {
    for (const std::string& key : mix_keys(*o.drawn)) features[key] = true;
    arguments["case"] = case_to_json(*o.drawn);
    representation = case_summary(*o.drawn);
  }
  return {{"type", "test_case"},
          {"status", o.status},
          {"status_reason", o.reason},
          {"representation", representation},
          {"arguments", arguments},
          {"how_generated", "generated (draw " + std::to_string(o.draw) + " of " + std::to_string(o.cases) + ", seed " +
                                std::to_string(o.seed) + ", size " + std::to_string(o.size) + ")"},
          {"features", features},
          {"coverage", nullptr},
          {"timing", {{"execute:test", o.seconds}, {"execute:backend", o.backend_seconds}}},
          {"metadata",
           {{"backend", o.backend},
            {"backend_version", o.backend_version},
            {"seed", o.seed},
            {"shard", to_string(o.shard)}}},
          {"property", o.backend + "/" + o.property},
          {"run_start", o.run_start}};
}

bool append_json_line(const std::string& path, const nlohmann::ordered_json& line) {
  const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  const bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

}  // namespace attn_oracle::runner
