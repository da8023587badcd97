// draw_settings.hpp: what a run's draws are sized by. Resolved at the
// program's edge (`check --profile`, `--shape-stable`, or ATTN_ORACLE_PROFILE /
// ATTN_ORACLE_SHAPE_STABLE as harness/settings.hpp read them) and passed down
// in RunSettings (property_runner.hpp): the generators never read the
// environment.
#pragma once

#include <optional>
#include <string_view>

namespace attn_oracle::inline properties {

// How large the drawn inputs get (generators.hpp):
//  - ci (the default, every ctest run): documents up to 48 tokens, in a
//    tile-edge mode sides of 63, 64, 65, 127, 128, 129 tokens, and in the
//    kernel-tile mode (a share of the attention and metadata draws) documents
//    of 256 to 4096 tokens on a side in rows of up to 16384 (attention) or 4100
//    (metadata) tokens, each draw inside a budget of (query, key) pairs
//    (kernel_tile_budget); head_dim up to 256;
//  - deep (longer campaigns): rows up to kDeepMaxLen tokens, up to 16 documents a
//    row, tile edges up to 4095..4097 and drawn more often, and kernel-tile
//    draws 4 times the ci budget.
enum class SizeProfile { ci, deep };
std::string_view to_string(SizeProfile profile);
// "ci" or "deep", as to_string writes them; nullopt for anything else.
inline std::optional<SizeProfile> size_profile_from(std::string_view text) {
  if (text == "ci") return SizeProfile::ci;
  if (text == "deep") return SizeProfile::deep;
  return std::nullopt;
}

struct DrawSettings {
  SizeProfile profile = SizeProfile::ci;
  bool shape_stable = false;  // sizes from a small menu (drawing_domain, generators.hpp)
};

}  // namespace attn_oracle::properties
