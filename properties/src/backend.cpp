// backend.cpp: the backend registry behind ATTN_ORACLE_REGISTER_BACKEND.
#include "attn_oracle/backend.hpp"

namespace attn_oracle {

std::string_view to_string(Capability capability) {
  switch (capability) {
    case Capability::metadata: return "metadata";
    case Capability::attention: return "attention";
  }
  return "?";
}

bool Backend::has(Capability capability) {
  switch (capability) {
    case Capability::metadata: return metadata() != nullptr;
    case Capability::attention: return attention() != nullptr;
  }
  return false;
}

std::vector<Capability> Backend::capabilities() {
  std::vector<Capability> out;
  for (Capability c : {Capability::metadata, Capability::attention})
    if (has(c)) out.push_back(c);
  return out;
}

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
  for (const auto& [existing, factory] : factories_)
    if (existing == name) return factory();
  return nullptr;
}

}  // namespace attn_oracle
