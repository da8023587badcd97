// production_backends.hpp: the backends this build ships besides the reference,
// all behind the seam (backend.hpp):
//   cpu    the CPU twins of the gpu/ kernels (always)
//   cuda   the CUDA kernels (builds with CUDA, on a machine with a device)
//   cudnn  cuDNN SDPA (builds with cuDNN and its frontend, with a device)
// Programs reach them only through the registry and these three functions.
#pragma once

#include <string>

namespace attn_oracle::inline backends {

// Adds cpu, and cuda / cudnn where this build and machine can run them (idempotent).
void register_production_backends();
// Why a production backend is absent on this machine ("; "-separated), or "".
std::string production_backends_note();
// The CUDA device these backends would run on, or "no device".
std::string production_device();

}  // namespace attn_oracle::backends
