// cudnn_support.cpp: see cudnn_support.hpp. The limits are cuDNN's support matrix
// for SDPA (fp16/bf16, sm80+, head_dim a multiple of 8 up to 256 on Hopper) and the
// version guards its frontend applies; every reason names the value that failed.
#include "cudnn_support.hpp"

namespace attn_oracle::inline backends::cudnn {
namespace {

std::string platform_text(const Platform& p) {
  return "cuDNN " + version_string(p.version) + " on compute capability " + std::to_string(p.cc_major) + "." +
         std::to_string(p.cc_minor);
}

// The largest head_dim cuDNN SDPA takes on this architecture (forward and backward).
int64_t max_head_dim(const Platform& p, bool backward) {
  if (p.cc_major == 9) return 256;
  if (p.cc_major == 10) return p.version >= 92300 ? 256 : 128;
  return backward ? 128 : 256;  // Ampere / Ada
}

}  // namespace

std::string version_string(int64_t version) {
  return std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
         std::to_string(version % 100);
}

std::optional<std::string> unsupported(const Platform& p, const AttentionShape& shape, const Band& band,
                                       Layout layout) {
  if (p.version < 90000) return platform_text(p) + ": the backend needs cuDNN 9 or newer";
  if (p.cc_major < 8) return platform_text(p) + ": cuDNN SDPA needs compute capability 8.0 or newer";
  if (shape.dtype == Dtype::fp32) return "cuDNN SDPA takes fp16 or bf16, not fp32";
  if (shape.head_dim % 8 != 0)
    return "head_dim " + std::to_string(shape.head_dim) + ": cuDNN SDPA needs a multiple of 8";
  if (shape.head_dim > max_head_dim(p, shape.backward))
    return "head_dim " + std::to_string(shape.head_dim) + ": " + platform_text(p) + " takes at most " +
           std::to_string(max_head_dim(p, shape.backward)) + (shape.backward ? " with backward" : "");
  if (layout == Layout::thd && p.cc_major < 9)
    return platform_text(p) + ": ragged (THD) offsets need compute capability 9.0; this batch is not one document per row";
  if (layout == Layout::thd && p.version < 90600 && shape.heads_q != shape.heads_kv)
    return platform_text(p) + ": GQA with ragged offsets needs cuDNN 9.6";
  if (shape.backward && (p.version == 91000 || p.version == 91001))
    return platform_text(p) + ": SDPA backward has known bugs in cuDNN 9.10.0 and 9.10.1";
  if (band.left_bound && !band.right_bound && p.version < 91002)
    return platform_text(p) + ": a left window without a causal mask or right window needs cuDNN 9.10.2";
  if (band.bottom_right && band.left_bound && p.cc_major == 9 && p.version <= 90900)
    return platform_text(p) + ": bottom-right causal with a left window is unsupported on Hopper before cuDNN 9.10";
  return std::nullopt;
}

}  // namespace attn_oracle::backends::cudnn
