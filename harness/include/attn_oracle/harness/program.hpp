// program.hpp: the path of the running executable, for the replay and rerun
// lines a failure prints (so that they run as printed, from any directory).
#pragma once

#include <filesystem>
#include <string>
#include <system_error>

namespace attn_oracle::inline harness {

inline std::string this_program() {
  std::error_code ec;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("attn-oracle") : path.string();
}

}  // namespace attn_oracle::harness
