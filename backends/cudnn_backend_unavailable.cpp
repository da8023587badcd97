// cudnn_backend_unavailable.cpp: the stand-in for builds without the `cudnn`
// backend (no CUDA, no cuDNN 9, or no frontend headers; see cmake/AttnOracleCudnn.cmake).
#include "cudnn_backend.hpp"

namespace attn_oracle::inline backends {

void register_cudnn_backend(BackendRegistry&) {}

std::string cudnn_backend_note() {
  return "cudnn: not in this build (it needs CUDA, cuDNN 9 and the cuDNN frontend headers that scripts/setup "
         "installs, see ATTN_ORACLE_CUDNN)";
}

}  // namespace attn_oracle::backends
