// dispatch_switch.hpp: a problem's runtime (dtype, head dim) -> the compile-time
// element type and head dim a kernel template is instantiated for; the one switch
// between the host entry points and their instantiations (the CuTe attention kernels,
// flash_config.hpp's FlashDtypes x FlashHeadDims; the small-seq kernels). An entry
// point names the grid it instantiates, with the element types of its own library
// (CuTe's half_t, CUDA's __half), so the switch and the list of what is compiled are
// the same list. Plain C++17.
#pragma once

#include "attn_oracle/gpu/attention/attention_params.hpp"  // AttnDtype

namespace attn_oracle::gpu {

// Storage type T for the dtype code kCode (kFp16, kBf16).
template <int kCode, class T>
struct DtypeElement {
  static constexpr int kDtype = kCode;
  using Type = T;
};

// The dtypes an entry point has kernels for, as DtypeElements.
template <class... Elements>
struct Dtypes {
  static constexpr bool contains(int dtype) { return ((dtype == Elements::kDtype) || ...); }
};

// The head dims an entry point has kernels for.
template <int... kDims>
struct HeadDims {
  static constexpr bool contains(int head_dim) { return ((head_dim == kDims) || ...); }
};

// One instantiation: what a kernel template is given.
template <class T, int D>
struct KernelInstance {
  using Element = T;
  static constexpr int kDim = D;
};

// f(KernelInstance<T, D>{}) for the listed pair equal to (dtype, head_dim), else
// otherwise(); both return bool. The listed pairs are every element type with every
// head dim: each one that can be called is compiled.
template <class... Elements, int... kDims, class F, class Otherwise>
bool switch_dtype_head_dim(Dtypes<Elements...>, HeadDims<kDims...>, int dtype, int head_dim, F&& f,
                           Otherwise&& otherwise) {
  bool result = false;
  auto with_element = [&](auto element) {
    using T = typename decltype(element)::Type;
    return ((head_dim == kDims && (result = f(KernelInstance<T, kDims>{}), true)) || ...);
  };
  if (((dtype == Elements::kDtype && with_element(Elements{})) || ...)) return result;
  return otherwise();
}

}  // namespace attn_oracle::gpu
