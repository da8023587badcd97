// arrays.hpp: what every binding of attn_oracle._core shares: NumPy arrays in
// and out (nanobind ndarrays, C-contiguous, on the CPU; the Python layer makes
// them so), the packed batch built from them, and the one way an error leaves:
// attn_oracle.AttnOracleError with the stable code of error.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include "attn_oracle/model/error.hpp"
#include "attn_oracle/model/packed_batch.hpp"

namespace attn_oracle::python {

namespace nb = nanobind;

using IntIn = nb::ndarray<const int64_t, nb::c_contig, nb::device::cpu>;
using FloatIn = nb::ndarray<const double, nb::c_contig, nb::device::cpu>;

// Raises attn_oracle.AttnOracleError(code, message); never returns.
[[noreturn]] void raise(const Error& error);
[[noreturn]] void raise(ErrorCode code, const std::string& message);

template <class T>
const T& value_or_raise(const Expected<T>& e) {
  if (!e) raise(e.error());
  return e.value();
}

Shape shape_of(const IntIn& a);
Shape shape_of(const FloatIn& a);
IntArray int_array(const IntIn& a);
std::vector<double> float_vector(const FloatIn& a);

// A NumPy array that owns `data` (moved), of the given shape (product == size).
template <class T>
nb::object numpy_array(std::vector<T> data, const Shape& shape) {
  auto* owned = new std::vector<T>(std::move(data));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  std::vector<size_t> dims(shape.begin(), shape.end());
  return nb::ndarray<nb::numpy, T>(owned->data(), dims.size(), dims.data(), owner).cast();
}

// A NumPy bool array from 0 / 1 bytes.
nb::object numpy_bool_array(std::vector<char> data, const Shape& shape);

// The packed batch of docs/semantics.md#1-inputs from the arrays and the mask spec;
// an unknown mask name is bad_mask.
PackedBatch packed_batch(const IntIn& q_ids, const IntIn& q_pos, const IntIn& kv_ids, const IntIn& kv_pos,
                         const std::string& mask, std::pair<int64_t, int64_t> window, int64_t max_segments);

// extra + tail
Shape concat(const Shape& extra, std::initializer_list<int64_t> tail);

void bind_oracle(nb::module_& m);
void bind_cases(nb::module_& m);
void bind_tolerance(nb::module_& m);
void bind_adapters(nb::module_& m);
void bind_kv_buffer(nb::module_& m);

}  // namespace attn_oracle::python
