// arrays.cpp: NumPy arrays in and out, the packed batch, errors (arrays.hpp).
#include "arrays.hpp"

#include <nanobind/stl/string.h>

namespace attn_oracle::python {

void raise(const Error& error) {
  nb::object cls = nb::module_::import_("attn_oracle.errors").attr("AttnOracleError");
  nb::object exception = cls(std::string(to_string(error.code)), error.message);
  PyErr_SetObject(cls.ptr(), exception.ptr());
  throw nb::python_error();
}

void raise(ErrorCode code, const std::string& message) { raise(Error{code, message}); }

template <class Array>
Shape shape_of_array(const Array& a) {
  Shape s(a.ndim());
  for (size_t d = 0; d < a.ndim(); ++d) s[d] = static_cast<int64_t>(a.shape(d));
  return s;
}

Shape shape_of(const IntIn& a) { return shape_of_array(a); }
Shape shape_of(const FloatIn& a) { return shape_of_array(a); }

IntArray int_array(const IntIn& a) {
  return IntArray(shape_of(a), std::vector<int64_t>(a.data(), a.data() + a.size()));
}

std::vector<double> float_vector(const FloatIn& a) { return std::vector<double>(a.data(), a.data() + a.size()); }

nb::object numpy_bool_array(std::vector<char> data, const Shape& shape) {
  auto* owned = new std::vector<char>(std::move(data));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<char>*>(p); });
  std::vector<size_t> dims(shape.begin(), shape.end());
  static_assert(sizeof(bool) == sizeof(char));
  return nb::ndarray<nb::numpy, bool>(reinterpret_cast<bool*>(owned->data()), dims.size(), dims.data(), owner).cast();
}

PackedBatch packed_batch(const IntIn& q_ids, const IntIn& q_pos, const IntIn& kv_ids, const IntIn& kv_pos,
                         const std::string& mask, std::pair<int64_t, int64_t> window, int64_t max_segments) {
  PackedBatch b;
  const auto kind = mask_kind_from_string(mask);
  if (!kind) 
    raise(ErrorCode::bad_mask, "mask: unknown mask kind \"" + mask +
                                   "\" (expected no_mask, padding, causal, padding_causal, "
                                   "causal_bottom_right or padding_causal_bottom_right)");
  b.mask = *kind;
  b.window = Window{window.first, window.second};
  b.max_segments = max_segments;
  b.q = PackedSide{int_array(q_ids), int_array(q_pos)};
  b.kv = PackedSide{int_array(kv_ids), int_array(kv_pos)};
  return b;
}

Shape concat(const Shape& extra, std::initializer_list<int64_t> tail) {
  Shape s = extra;
  s.insert(s.end(), tail);
  return s;
}

}  // namespace attn_oracle::python
