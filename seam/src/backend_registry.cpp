// backend_registry.cpp: the registry behind ATTN_ORACLE_REGISTER_BACKEND
// (backend.hpp): registered backends by name, and `exec:COMMAND` as a worker
// process (process_backend.hpp), which sits above the seam's interface.
#include "attn_oracle/seam/backend.hpp"
#include "attn_oracle/seam/process_backend.hpp"

namespace attn_oracle::inline seam {

BackendRegistry& BackendRegistry::instance() {
  static BackendRegistry registry;
  return registry;
}

bool BackendRegistry::add(const std::string& name, BackendFactory factory) {
  for (auto& [existing, f] : factories_)
    if (existing == name) {
      f = std::move(factory);
      return true;
    }
  factories_.emplace_back(name, std::move(factory));
  return true;
}

std::vector<std::string> BackendRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& entry : factories_) out.push_back(entry.first);
  return out;
}

std::unique_ptr<Backend> BackendRegistry::make(const std::string& name) const {
  if (name.starts_with(kProcessBackendPrefix)) return make_process_backend(name.substr(kProcessBackendPrefix.size()));
  for (const auto& [existing, factory] : factories_)
    if (existing == name) return factory();
  return nullptr;
}

}  // namespace attn_oracle::seam
