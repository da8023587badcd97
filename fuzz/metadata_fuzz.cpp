// metadata_fuzz.cpp: input validation and metadata on arbitrary ids, positions
// and shapes. The bytes decode to a small packed batch that is valid more often
// than not (documents as runs, positions mostly increasing) with every kind of
// defect mixed in: negative or oversized ids, reappearing documents, padding
// under causal masks, repeated or negative positions, ranks, suffix shapes and
// extra dims that do not broadcast, M from -1 to 8. The production CPU twin must
// agree with the reference exactly: the same error code, or the same metadata.
// Any difference, and any crash, is a finding.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "attn_oracle/gpu/metadata.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "fuzz_input.hpp"

namespace attn_oracle::fuzz {
namespace {

Shape draw_shape(ByteReader& in) {
  Shape shape(static_cast<size_t>(in.in_range(0, 2)));  // extra dims
  for (int64_t& d : shape) d = in.in_range(0, 3);
  shape.push_back(in.in_range(1, 3));  // B
  shape.push_back(in.in_range(0, 8));  // T
  return shape;
}

// Mostly well-formed rows: runs of increasing ids, padding, occasional defects.
IntArray draw_ids(ByteReader& in, const Shape& shape, int64_t max_segments) {
  IntArray a{shape, std::vector<int64_t>(static_cast<size_t>(shape_product(shape)))};
  const int64_t t_len = shape.back();
  for (size_t t = 0; t < a.data.size(); ++t) {
    const int64_t previous = t % t_len == 0 ? 1 : a.data[t - 1];
    switch (in.byte() % 8) {
      case 5: a.data[t] = previous + 1; break;
      case 6: a.data[t] = 0; break;
      case 7: a.data[t] = in.in_range(-1, max_segments + 1); break;
      default: a.data[t] = previous;
    }
  }
  return a;
}

IntArray draw_positions(ByteReader& in, const Shape& ids_shape) {
  // A trailing suffix of the ids' shape (what docs/semantics.md#1-inputs allows), now and then not.
  size_t rank = ids_shape.size();
  switch (in.byte() % 4) {
    case 1: rank = 2; break;
    case 2: rank = static_cast<size_t>(in.in_range(0, 4)); break;
    default: break;
  }
  Shape shape(ids_shape.end() - static_cast<int64_t>(std::min(rank, ids_shape.size())), ids_shape.end());
  while (shape.size() < rank) shape.insert(shape.begin(), in.in_range(1, 2));
  if (in.byte() % 16 == 0 && !shape.empty()) shape.back() += 1;
  IntArray a{shape, std::vector<int64_t>(static_cast<size_t>(shape_product(shape)))};
  const int64_t t_len = shape.empty() ? 1 : std::max<int64_t>(1, shape.back());
  for (size_t t = 0; t < a.data.size(); ++t) {
    const int64_t previous = t % t_len == 0 ? -1 : a.data[t - 1];
    switch (in.byte() % 8) {
      case 6: a.data[t] = previous; break;
      case 7: a.data[t] = in.in_range(-2, 30); break;
      default: a.data[t] = previous + 1;
    }
  }
  return a;
}

PackedBatch draw_batch(ByteReader& in) {
  PackedBatch b;
  b.mask = static_cast<MaskKind>(in.in_range(0, 5));
  b.window = in.flag() ? Window{in.in_range(-2, 5), in.in_range(-2, 5)} : Window{};
  b.max_segments = in.in_range(-1, 8);
  const Shape q_shape = draw_shape(in);
  Shape kv_shape = in.flag() ? q_shape : draw_shape(in);
  if (in.flag()) kv_shape.back() = in.in_range(0, 8);  // cross-attention: its own T
  b.q.segment_ids = draw_ids(in, q_shape, b.max_segments);
  b.q.segment_pos = draw_positions(in, q_shape);
  b.kv.segment_ids = draw_ids(in, kv_shape, b.max_segments);
  b.kv.segment_pos = draw_positions(in, kv_shape);
  return b;
}

[[noreturn]] void finding(const char* what, const std::string& detail) {
  std::fprintf(stderr, "metadata_fuzz: %s\n%s\n", what, detail.c_str());
  std::abort();
}

}  // namespace
}  // namespace attn_oracle::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace attn_oracle;
  fuzz::ByteReader in(data, size);
  const PackedBatch batch = fuzz::draw_batch(in);
  const Expected<Metadata> ref = ref::metadata(batch);
  const Expected<Metadata> twin = gpu::metadata_twin(batch);
  if (ref.ok() != twin.ok())
    fuzz::finding("one of reference and twin rejects the input",
                  ref.ok() ? "twin: " + twin.error().message : "reference: " + ref.error().message);
  if (!ref.ok()) {
    if (ref.error().code != twin.error().code)
      fuzz::finding("different error codes", "reference: " + std::string(to_string(ref.error().code)) + ": " +
                                                 ref.error().message + "\ntwin: " +
                                                 std::string(to_string(twin.error().code)) + ": " +
                                                 twin.error().message);
    return 0;
  }
  if (!(ref.value() == twin.value())) fuzz::finding("different metadata", "");
  (void)ref::representability(batch);  // must not crash on any valid batch
  return 0;
}
