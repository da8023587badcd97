// adapter_bindings.cpp: the convention adapters of adapters/ (FlashAttention,
// cuDNN, PyTorch, TransformerEngine) on NumPy arrays and plain values. Our
// packed batch travels as a dict whose keys are attn_oracle.oracle's batch
// arguments (q_segment_ids, q_segment_pos, kv_segment_ids, kv_segment_pos,
// mask, window, max_segments), so `oracle.metadata(**batch)` takes it as is.
// The Python layer (attn_oracle/adapters.py) names and documents the functions;
// every refusal is raised as AttnOracleError with its code. Tested by
// python/tests/test_adapters.py.
#include <optional>
#include <string>
#include <vector>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "arrays.hpp"
#include "attn_oracle/adapters/cudnn.hpp"
#include "attn_oracle/adapters/flash_attention.hpp"
#include "attn_oracle/adapters/torch.hpp"
#include "attn_oracle/adapters/transformer_engine.hpp"

namespace attn_oracle::python {
namespace {

namespace fa = adapters::flash_attention;
namespace cd = adapters::cudnn;
namespace th = adapters::torch;
namespace te = adapters::transformer_engine;

using Window2 = std::pair<int64_t, int64_t>;
using Ints = std::vector<int64_t>;

nb::dict batch_dict(const PackedBatch& b) {
  nb::dict d;
  d["q_segment_ids"] = numpy_array(b.q.segment_ids.data, b.q.segment_ids.shape);
  d["q_segment_pos"] = numpy_array(b.q.segment_pos.data, b.q.segment_pos.shape);
  d["kv_segment_ids"] = numpy_array(b.kv.segment_ids.data, b.kv.segment_ids.shape);
  d["kv_segment_pos"] = numpy_array(b.kv.segment_pos.data, b.kv.segment_pos.shape);
  d["mask"] = std::string(to_string(b.mask));
  d["window"] = Window2{b.window.left, b.window.right};
  d["max_segments"] = b.max_segments;
  return d;
}

fa::Version fa_version(const std::string& name) {
  if (name == "fa2") return fa::Version::fa2;
  if (name == "fa3") return fa::Version::fa3;
  raise(ErrorCode::unsupported, "version: \"" + name + "\" (expected \"fa2\" or \"fa3\")");
}

cd::DiagonalAlignment alignment(const std::string& name) {
  if (name == "top_left") return cd::DiagonalAlignment::top_left;
  if (name == "bottom_right") return cd::DiagonalAlignment::bottom_right;
  raise(ErrorCode::unsupported, "alignment: \"" + name + "\" (expected \"top_left\" or \"bottom_right\")");
}

th::SdpaCausal sdpa_causal(const std::string& name) {
  if (name == "none") return th::SdpaCausal::none;
  if (name == "is_causal") return th::SdpaCausal::is_causal;
  if (name == "causal_lower_right") return th::SdpaCausal::causal_lower_right;
  raise(ErrorCode::unsupported, "causal: \"" + name + "\" (expected \"none\", \"is_causal\" or \"causal_lower_right\")");
}

std::string sdpa_causal_name(th::SdpaCausal c) {
  return c == th::SdpaCausal::none ? "none" : c == th::SdpaCausal::is_causal ? "is_causal" : "causal_lower_right";
}

// ------------------------------------------------------------------ FlashAttention
nb::dict flash_to_batch(Ints cu_q, Ints cu_k, int64_t max_q, int64_t max_k, bool causal, Window2 window,
                        const std::string& version) {
  const fa::VarlenParams p{std::move(cu_q), std::move(cu_k), max_q, max_k, causal, window.first, window.second,
                           fa_version(version)};
  return batch_dict(value_or_raise(fa::to_packed_batch(p)));
}

nb::dict flash_from_batch(const IntIn& q_ids, const IntIn& q_pos, const IntIn& kv_ids, const IntIn& kv_pos,
                          const std::string& mask, Window2 window, int64_t max_segments, const std::string& version) {
  const PackedBatch batch = packed_batch(q_ids, q_pos, kv_ids, kv_pos, mask, window, max_segments);
  const fa::VarlenCall call = value_or_raise(fa::to_flash_attention(batch, fa_version(version)));
  const fa::VarlenParams& p = call.params;
  nb::dict d;
  d["cu_seqlens_q"] = numpy_array(p.cu_seqlens_q, {static_cast<int64_t>(p.cu_seqlens_q.size())});
  d["cu_seqlens_k"] = numpy_array(p.cu_seqlens_k, {static_cast<int64_t>(p.cu_seqlens_k.size())});
  d["max_seqlen_q"] = p.max_seqlen_q, d["max_seqlen_k"] = p.max_seqlen_k;
  d["causal"] = p.causal;
  d["window_size"] = Window2{p.window_left, p.window_right};
  d["q_tokens"] = numpy_array(call.q_tokens, {static_cast<int64_t>(call.q_tokens.size())});
  d["kv_tokens"] = numpy_array(call.kv_tokens, {static_cast<int64_t>(call.kv_tokens.size())});
  return d;
}

// ------------------------------------------------------------------ cuDNN
nb::dict cudnn_to_batch(Ints seq_q, Ints seq_kv, Ints ragged_q, Ints ragged_kv, int64_t q_ept, int64_t kv_ept,
                        const std::string& align, std::optional<int64_t> left, std::optional<int64_t> right) {
  const cd::SdpaRaggedParams p{std::move(seq_q), std::move(seq_kv), std::move(ragged_q), std::move(ragged_kv),
                               q_ept, kv_ept, alignment(align), left, right};
  return batch_dict(value_or_raise(cd::to_packed_batch(p)));
}

nb::dict cudnn_from_batch(const IntIn& q_ids, const IntIn& q_pos, const IntIn& kv_ids, const IntIn& kv_pos,
                          const std::string& mask, Window2 window, int64_t max_segments, int64_t q_ept, int64_t kv_ept) {
  const PackedBatch batch = packed_batch(q_ids, q_pos, kv_ids, kv_pos, mask, window, max_segments);
  const cd::SdpaRaggedParams p = value_or_raise(cd::to_cudnn(batch, q_ept, kv_ept));
  nb::dict d;
  for (auto [name, v] : {std::pair{"seq_len_q", &p.seq_len_q}, std::pair{"seq_len_kv", &p.seq_len_kv},
                         std::pair{"ragged_offset_q", &p.ragged_offset_q}, std::pair{"ragged_offset_kv", &p.ragged_offset_kv}})
    d[name] = numpy_array(*v, {static_cast<int64_t>(v->size())});
  d["diagonal_alignment"] = p.alignment == cd::DiagonalAlignment::top_left ? "top_left" : "bottom_right";
  d["left_bound"] = p.left_bound, d["right_bound"] = p.right_bound;
  return d;
}

// ------------------------------------------------------------------ PyTorch
nb::dict sdpa_to_batch(int64_t batch, int64_t q_len, int64_t kv_len, const std::string& causal) {
  return batch_dict(value_or_raise(th::to_packed_batch(th::SdpaParams{batch, q_len, kv_len, sdpa_causal(causal)})));
}

nb::dict sdpa_from_batch(const IntIn& q_ids, const IntIn& q_pos, const IntIn& kv_ids, const IntIn& kv_pos,
                         const std::string& mask, Window2 window, int64_t max_segments) {
  const th::SdpaParams p = value_or_raise(th::to_sdpa(packed_batch(q_ids, q_pos, kv_ids, kv_pos, mask, window, max_segments)));
  nb::dict d;
  d["batch"] = p.batch, d["q_len"] = p.q_len, d["kv_len"] = p.kv_len, d["causal"] = sdpa_causal_name(p.causal);
  return d;
}

nb::dict flex_to_batch(const IntIn& document_id, bool causal, int64_t sliding_window, int64_t window_right) {
  return batch_dict(value_or_raise(
      th::to_packed_batch(th::FlexDocumentMask{int_array(document_id), causal, sliding_window, window_right})));
}

nb::dict flex_from_batch(const IntIn& q_ids, const IntIn& q_pos, const IntIn& kv_ids, const IntIn& kv_pos,
                         const std::string& mask, Window2 window, int64_t max_segments) {
  const th::FlexDocumentMask f =
      value_or_raise(th::to_flex_document_mask(packed_batch(q_ids, q_pos, kv_ids, kv_pos, mask, window, max_segments)));
  nb::dict d;
  d["document_id"] = numpy_array(f.document_id.data, f.document_id.shape);
  d["causal"] = f.causal, d["sliding_window"] = f.sliding_window, d["window_right"] = f.window_right;
  return d;
}

// ------------------------------------------------------------------ TransformerEngine
nb::dict te_thd_to_batch(const std::string& attn_mask_type, Window2 window, Ints cu_q, Ints cu_kv, Ints cu_q_padded,
                         Ints cu_kv_padded) {
  const te::ThdParams p{attn_mask_type, te::WindowSize{window.first, window.second}, std::move(cu_q), std::move(cu_kv),
                        std::move(cu_q_padded), std::move(cu_kv_padded)};
  return batch_dict(value_or_raise(te::to_packed_batch(p)));
}

nb::dict te_thd_from_batch(const IntIn& q_ids, const IntIn& q_pos, const IntIn& kv_ids, const IntIn& kv_pos,
                           const std::string& mask, Window2 window, int64_t max_segments) {
  const te::ThdParams p = value_or_raise(te::to_thd(packed_batch(q_ids, q_pos, kv_ids, kv_pos, mask, window, max_segments)));
  nb::dict d;
  d["attn_mask_type"] = p.attn_mask_type;
  d["window_size"] = Window2{p.window_size.left, p.window_size.right};
  for (auto [name, v] : {std::pair{"cu_seqlens_q", &p.cu_seqlens_q}, std::pair{"cu_seqlens_kv", &p.cu_seqlens_kv},
                         std::pair{"cu_seqlens_q_padded", &p.cu_seqlens_q_padded},
                         std::pair{"cu_seqlens_kv_padded", &p.cu_seqlens_kv_padded}})
    d[name] = numpy_array(*v, {static_cast<int64_t>(v->size())});
  return d;
}

std::string te_mask_kind(const std::string& attn_mask_type) {
  return std::string(to_string(value_or_raise(te::mask_kind_from_attn_mask_type(attn_mask_type))));
}

}  // namespace

void bind_adapters(nb::module_& m) {
  m.def("flash_to_batch", &flash_to_batch);
  m.def("flash_from_batch", &flash_from_batch);
  m.def("cudnn_to_batch", &cudnn_to_batch);
  m.def("cudnn_from_batch", &cudnn_from_batch);
  m.def("sdpa_to_batch", &sdpa_to_batch);
  m.def("sdpa_from_batch", &sdpa_from_batch);
  m.def("flex_to_batch", &flex_to_batch);
  m.def("flex_from_batch", &flex_from_batch);
  m.def("te_thd_to_batch", &te_thd_to_batch);
  m.def("te_thd_from_batch", &te_thd_from_batch);
  m.def("te_mask_kind", &te_mask_kind);
}

}  // namespace attn_oracle::python
