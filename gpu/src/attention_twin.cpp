// attention_twin.cpp: the CPU twin of the fused varlen attention kernels
// (docs/semantics.md#5-attention-outputs-and-gradients). The kernels' per-tile and per-row
// functions (attention/*.hpp) run in loops over documents, heads and tiles instead of across CUDA
// blocks:
//  - forward, the tensor-core kernels' schedule (flash_tile.hpp), per (document,
//    query head, q tile of kBlockM rows): over the kBlockN-key tiles of
//    kv_tile_range, S = Q K^T in fp32 taken to base 2 (score_log2), masked by
//    the row's key interval outside tile_fully_allowed tiles, the online softmax
//    per row, P rounded to the dtype before O = O * alpha + P V (fp32); finally
//    O / l rounded to the dtype and lse = (m + log2 l) ln 2 in fp32;
//  - backward, the tensor-core kernels' schedule (flash_tile.hpp): delta =
//    rowsum(dO * O) from the rounded O in flash_delta's order; dK, dV per
//    (document, kv head, key block) over the group's query heads and the q blocks
//    of q_tile_range, dQ per (document, query head, q block) over kv_tile_range in
//    its own pass. p = backward_weight from the row's lse, ds = score_grad (before
//    the softmax scale); round(p) meets dO and round(ds) meets Q and K, as the
//    tensor cores see them; dK and dQ are scaled at the end.
// The metadata comes from the production path (metadata_twin), never from the
// reference that judges this code. Tokens outside every document, queries that
// attend nothing and keys nobody attends get exactly 0 (lse -inf).
//
// Tested by tests/attention_twin_test.cpp (hand cases, twin vs reference within
// the tolerance rule, determinism) and by the attention properties of the
// conformance suite on the `cpu` backend; the tile ranges by
// tests/attention_tiles_test.cpp.
#include <algorithm>
#include <climits>
#include <cmath>
#include <utility>
#include <vector>

#include "attn_oracle/gpu/host_checks.hpp"
#include "attn_oracle/gpu/attention.hpp"
#include "attn_oracle/gpu/attention/attention_params.hpp"
#include "attn_oracle/gpu/attention/doc_span.hpp"
#include "attn_oracle/gpu/attention/flash_tile.hpp"
#include "attn_oracle/gpu/attention/index_mask.hpp"
#include "attn_oracle/gpu/attention/numeric.hpp"
#include "attn_oracle/gpu/attention/tile_range.hpp"
#include "attn_oracle/gpu/mask_rule.hpp"
#include "attn_oracle/gpu/metadata.hpp"

namespace attn_oracle::gpu {

static_assert(static_cast<int>(Dtype::fp32) == kFp32 && static_cast<int>(Dtype::fp16) == kFp16 &&
              static_cast<int>(Dtype::bf16) == kBf16);
static_assert(static_cast<int>(MaskKind::causal) == kCausal &&
              static_cast<int>(MaskKind::padding_causal_bottom_right) == kPaddingCausalBottomRight);

namespace {

// ---------------------------------------------------------------- validation

struct TwinSizes {
  int64_t rows = 0, tq = 0, tkv = 0, hq = 0, hkv = 0, d = 0;
  int64_t q_elems() const { return rows * tq * hq * d; }
  int64_t kv_elems() const { return rows * tkv * hkv * d; }
  int64_t lse_elems() const { return rows * hq * tq; }
};



// Batch errors (from the metadata path), then heads, then tensor sizes and
// values, then the metadata's own spans (a metadata bug must not become an out-of-bounds write).
Expected<TwinSizes> validate(const AttentionProblem& problem, const AttentionInputs& in, const Metadata& md) {
  const AttentionShape& s = problem.shape;
  if (auto e = check_heads(s)) return *e;
  const int64_t tq = problem.batch.q.segment_ids.shape.back(), tkv = problem.batch.kv.segment_ids.shape.back();
  if (auto e = check_tensor_memory(md.extra, md.batch, tq, tkv, s)) return *e;
  TwinSizes z;
  z.rows = shape_product(md.extra) * md.batch;
  z.tq = problem.batch.q.segment_ids.shape.back();
  z.tkv = problem.batch.kv.segment_ids.shape.back();
  z.hq = s.heads_q, z.hkv = s.heads_kv, z.d = s.head_dim;
  if (auto e = check_tensor_size("q", in.q, z.q_elems())) return *e;
  if (auto e = check_tensor_size("k", in.k, z.kv_elems())) return *e;
  if (auto e = check_tensor_size("v", in.v, z.kv_elems())) return *e;
  if (auto e = check_tensor_size("do", in.d_o, s.backward ? z.q_elems() : 0)) return *e;
  if (auto e = check_attention_values(s, in, z.tq, z.tkv)) return *e;
  if (auto e = check_document_spans(md, z.rows, z.tq, z.tkv)) return *e;
  return z;
}

// ---------------------------------------------------------------- tensors

// The twin's device memory. Every float holds a value representable in the
// problem's dtype (what a half / bf16 buffer would hold), except the fp32
// accumulators dq, dk, dv, which are rounded only when copied out, and lse and
// delta, which are fp32 on the device too.
struct TwinBuffers {
  std::vector<float> q, k, v, d_o, o, lse, delta, dq, dk, dv;
};

// The host-to-device conversion: a no-op on inputs already rounded to the dtype.
std::vector<float> to_device(const std::vector<double>& t, int dtype) {
  std::vector<float> out(t.size());
  for (size_t i = 0; i < t.size(); ++i) out[i] = round_to(static_cast<float>(t[i]), dtype);
  return out;
}

AttentionBwdParams make_params(const AttentionProblem& problem, const TwinSizes& z, const Metadata& md,
                               TwinBuffers& b) {
  AttentionBwdParams p;
  p.q = b.q.data(), p.k = b.k.data(), p.v = b.v.data(), p.o = b.o.data(), p.lse = b.lse.data();
  p.cu_seqlens_q = md.cu_seqlens_q.data(), p.cu_seqlens_kv = md.cu_seqlens_kv.data();
  p.ragged_offsets_q = md.ragged_offsets_q.data(), p.ragged_offsets_kv = md.ragged_offsets_kv.data();
  p.docs = md.documents();
  p.total_q = z.rows * z.tq, p.total_kv = z.rows * z.tkv;
  p.heads_q = static_cast<int>(z.hq), p.heads_kv = static_cast<int>(z.hkv), p.head_dim = static_cast<int>(z.d);
  p.scale = static_cast<float>(problem.shape.effective_scale());
  p.mask = static_cast<int>(problem.batch.mask);
  p.window_left = problem.batch.window.left, p.window_right = problem.batch.window.right;
  p.dtype = static_cast<int>(problem.shape.dtype);
  p.d_o = b.d_o.data(), p.lse_in = b.lse.data(), p.o_in = b.o.data();
  p.dq = b.dq.data(), p.dk = b.dk.data(), p.dv = b.dv.data(), p.delta = b.delta.data();
  return p;
}

// Row `token` of head `head` in a [tokens, heads, head_dim] tensor.
const float* row_of(const void* t, int64_t token, int heads, int head, int d) {
  return static_cast<const float*>(t) + (token * heads + head) * d;
}
float* row_of(void* t, int64_t token, int heads, int head, int d) {
  return static_cast<float*>(t) + (token * heads + head) * d;
}

// ---------------------------------------------------------------- forward

// One (document, query head, q tile of the tensor-core forward's kBlockM rows):
// the kernel's thread block, over kv tiles of its kBlockN keys (flash_tile.hpp:
// `tile` is the SM80 kernel's or Hopper's).
void forward_q_tile(const AttentionFwdParams& p, const FlashTile& tile, const DocSpan& d, int h, int64_t q_tile) {
  const int D = p.head_dim, hk = kv_head_of(h, p.heads_q, p.heads_kv);
  const int64_t a0 = q_tile * tile.block_m, rows = std::min<int64_t>(tile.block_m, d.lq - a0);
  const float scale_log2 = p.scale * kLog2e;
  std::vector<float> o(rows * D, 0.0f), m(rows, -INFINITY), l(rows, 0.0f), s(tile.block_n);
  const TileRange kv = kv_tile_range(p.mask, p.window_left, p.window_right, a0, a0 + rows, d.lq, d.lkv, tile.block_n);
  for (int64_t n = kv.begin; n < kv.end; ++n) {
    const int64_t b0 = n * tile.block_n, cols = std::min<int64_t>(tile.block_n, d.lkv - b0);
    const bool full =
        tile_fully_allowed(p.mask, p.window_left, p.window_right, a0, a0 + rows, b0, b0 + tile.block_n, d.lq, d.lkv);
    for (int64_t i = 0; i < rows; ++i) {
      const KeyInterval keys = full ? KeyInterval{kUnboundedLo, kUnboundedHi}
                                    : key_interval(p.mask, p.window_left, p.window_right, a0 + i, d.lq, d.lkv);
      const float* q = row_of(p.q, d.q0 + a0 + i, p.heads_q, h, D);
      float row_max = m[i];
      for (int64_t j = 0; j < cols; ++j) {
        s[j] = -INFINITY;
        if (b0 + j < keys.lo || b0 + j > keys.hi) continue;
        const float* k = row_of(p.k, d.kv0 + b0 + j, p.heads_kv, hk, D);
        float raw = 0.0f;
        for (int c = 0; c < D; ++c) raw += q[c] * k[c];
        s[j] = score_log2(raw, scale_log2);
        row_max = std::max(row_max, s[j]);
      }
      const float alpha = rescale_factor(m[i], row_max);
      m[i] = row_max;
      float sum = 0.0f;
      for (int64_t j = 0; j < cols; ++j) sum += s[j] = softmax_weight(s[j], row_max);
      l[i] = l[i] * alpha + sum;
      float* oi = &o[i * D];
      for (int c = 0; c < D; ++c) oi[c] *= alpha;
      for (int64_t j = 0; j < cols; ++j) {  // P rounded to the storage type, as the tensor cores take it
        const float pj = round_to(s[j], p.dtype);
        const float* v = row_of(p.v, d.kv0 + b0 + j, p.heads_kv, hk, D);
        for (int c = 0; c < D; ++c) oi[c] += pj * v[c];
      }
    }
  }
  for (int64_t i = 0; i < rows; ++i) {
    const float inv = l[i] > 0.0f ? 1.0f / l[i] : 0.0f;
    float* out = row_of(p.o, d.q0 + a0 + i, p.heads_q, h, D);
    for (int c = 0; c < D; ++c) out[c] = round_to(o[i * D + c] * inv, p.dtype);
    p.lse[h * p.total_q + d.q0 + a0 + i] = lse_from_log2(m[i], l[i]);
  }
}

// o and lse must be zero / -inf filled: tokens outside every document keep that.
void forward_pass(const AttentionFwdParams& p, FlashArch arch) {
  const FlashTile tile = flash_forward_tile(p.head_dim, arch);
  for (int64_t doc = 0; doc < p.docs; ++doc) {
    const DocSpan d = doc_span(p, doc);
    for (int h = 0; h < p.heads_q; ++h)
      for (int64_t q_tile = 0; q_tile * tile.block_m < d.lq; ++q_tile) forward_q_tile(p, tile, d, h, q_tile);
  }
}

// ---------------------------------------------------------------- backward

// One query row's share of the backward: its q, dO, lse (base 2) and delta.
struct BackwardRow {
  const float* q;
  const float* d_o;
  float lse_log2, delta;
  KeyInterval keys;
};

BackwardRow backward_row(const AttentionBwdParams& p, const DocSpan& d, int h, int64_t a) {
  const int64_t token = d.q0 + a, stat = h * p.total_q + token;
  return BackwardRow{row_of(p.q, token, p.heads_q, h, p.head_dim), row_of(p.d_o, token, p.heads_q, h, p.head_dim),
                     lse_log2_of(p.lse_in[stat]), p.delta[stat],
                     key_interval(p.mask, p.window_left, p.window_right, a, d.lq, d.lkv)};
}

// p and ds = p (dP - delta) of (row, key b), both rounded to the storage type as the
// tensor cores take them; 0 where the key is masked. ds is before the softmax scale.
struct WeightAndGrad {
  float p, ds;
};

WeightAndGrad weight_and_grad(const AttentionBwdParams& p, const DocSpan& d, const BackwardRow& r, int hk, int64_t b,
                              float scale_log2) {
  if (b < r.keys.lo || b > r.keys.hi) return WeightAndGrad{0.0f, 0.0f};
  const float* k = row_of(p.k, d.kv0 + b, p.heads_kv, hk, p.head_dim);
  const float* v = row_of(p.v, d.kv0 + b, p.heads_kv, hk, p.head_dim);
  float raw = 0.0f, dp = 0.0f;
  for (int c = 0; c < p.head_dim; ++c) raw += r.q[c] * k[c];
  for (int c = 0; c < p.head_dim; ++c) dp += r.d_o[c] * v[c];
  const float w = backward_weight(raw, scale_log2, r.lse_log2);
  return WeightAndGrad{round_to(w, p.dtype), round_to(score_grad(w, dp, r.delta), p.dtype)};
}

// One (document, kv head, key block of flash_dkdv_tile's block_n keys): dK and dV
// over the group's query heads, each over the q blocks of q_tile_range in order.
void backward_kv_block(const AttentionBwdParams& p, const DocSpan& d, int hk, int64_t block) {
  const int D = p.head_dim, group = p.heads_q / p.heads_kv;
  const FlashDkdvTile tile = flash_dkdv_tile(D);
  const int64_t b0 = block * tile.block_n, keys = std::min<int64_t>(tile.block_n, d.lkv - b0);
  const float scale_log2 = p.scale * kLog2e;
  std::vector<float> dk(keys * D, 0.0f), dv(keys * D, 0.0f);
  const TileRange qr = q_tile_range(p.mask, p.window_left, p.window_right, b0, b0 + keys, d.lq, d.lkv, tile.block_m);
  for (int h = hk * group; h < (hk + 1) * group; ++h)
    for (int64_t a = qr.begin * tile.block_m; a < std::min<int64_t>(qr.end * tile.block_m, d.lq); ++a) {
      const BackwardRow r = backward_row(p, d, h, a);
      for (int64_t j = 0; j < keys; ++j) {
        const WeightAndGrad g = weight_and_grad(p, d, r, hk, b0 + j, scale_log2);
        for (int c = 0; c < D; ++c) dv[j * D + c] += g.p * r.d_o[c];
        for (int c = 0; c < D; ++c) dk[j * D + c] += g.ds * r.q[c];
      }
    }
  for (int64_t j = 0; j < keys; ++j) {
    float* dk_out = row_of(p.dk, d.kv0 + b0 + j, p.heads_kv, hk, D);
    for (int c = 0; c < D; ++c) dk_out[c] = dk[j * D + c] * p.scale;
    std::copy_n(&dv[j * D], D, row_of(p.dv, d.kv0 + b0 + j, p.heads_kv, hk, D));
  }
}

// One (document, query head, q block of flash_dq_tile's block_m rows): dQ over the
// key blocks of kv_tile_range in order, its own pass (no atomics).
void backward_q_block(const AttentionBwdParams& p, const DocSpan& d, int h, int64_t block) {
  const int D = p.head_dim, hk = kv_head_of(h, p.heads_q, p.heads_kv);
  const FlashTile tile = flash_dq_tile(D);
  const int64_t a0 = block * tile.block_m, rows = std::min<int64_t>(tile.block_m, d.lq - a0);
  const float scale_log2 = p.scale * kLog2e;
  const TileRange kv = kv_tile_range(p.mask, p.window_left, p.window_right, a0, a0 + rows, d.lq, d.lkv, tile.block_n);
  std::vector<float> dq(D);
  for (int64_t i = 0; i < rows; ++i) {
    const BackwardRow r = backward_row(p, d, h, a0 + i);
    std::fill(dq.begin(), dq.end(), 0.0f);
    for (int64_t b = kv.begin * tile.block_n; b < std::min<int64_t>(kv.end * tile.block_n, d.lkv); ++b) {
      const float ds = weight_and_grad(p, d, r, hk, b, scale_log2).ds;
      const float* k = row_of(p.k, d.kv0 + b, p.heads_kv, hk, D);
      for (int c = 0; c < D; ++c) dq[c] += ds * k[c];
    }
    float* out = row_of(p.dq, d.q0 + a0 + i, p.heads_q, h, D);
    for (int c = 0; c < D; ++c) out[c] = dq[c] * p.scale;
  }
}

// delta for every token (0 outside documents: o is 0 there), then the two passes.
// dq, dk, dv must be zero-filled: unattended and uncovered tokens keep 0.
void backward_passes(const AttentionBwdParams& p) {
  for (int64_t token = 0; token < p.total_q; ++token)
    for (int h = 0; h < p.heads_q; ++h)
      p.delta[h * p.total_q + token] = flash_delta(row_of(p.d_o, token, p.heads_q, h, p.head_dim),
                                                   row_of(p.o_in, token, p.heads_q, h, p.head_dim), p.head_dim);
  const FlashDkdvTile kv_tile = flash_dkdv_tile(p.head_dim);
  const FlashTile q_tile = flash_dq_tile(p.head_dim);
  for (int64_t doc = 0; doc < p.docs; ++doc) {
    const DocSpan d = doc_span(p, doc);
    for (int hk = 0; hk < p.heads_kv; ++hk)
      for (int64_t block = 0; block * kv_tile.block_n < d.lkv; ++block) backward_kv_block(p, d, hk, block);
    for (int h = 0; h < p.heads_q; ++h)
      for (int64_t block = 0; block * q_tile.block_m < d.lq; ++block) backward_q_block(p, d, h, block);
  }
}

// ---------------------------------------------------------------- outputs

void copy_out(const std::vector<float>& from, double* to, int dtype) {
  for (size_t i = 0; i < from.size(); ++i) to[i] = round_to(from[i], dtype);
}

// lse [Hq, R * Tq] -> [R, Hq, Tq].
void copy_lse_out(const std::vector<float>& lse, const TwinSizes& z, double* to) {
  for (int64_t r = 0; r < z.rows; ++r)
    for (int64_t h = 0; h < z.hq; ++h)
      for (int64_t t = 0; t < z.tq; ++t) to[(r * z.hq + h) * z.tq + t] = lse[h * z.rows * z.tq + r * z.tq + t];
}

// A validated problem: its production metadata and tensor sizes.
struct Prepared {
  Metadata md;
  TwinSizes z;
};

Expected<Prepared> prepare(const AttentionProblem& problem, const AttentionInputs& inputs) {
  auto md = metadata_twin(problem.batch);
  if (!md) return md.error();
  auto sizes = validate(problem, inputs, md.value());
  if (!sizes) return sizes.error();
  return Prepared{std::move(md).value(), sizes.value()};
}

// Runs the passes on the twin's buffers and writes exactly the logical outputs.
void run(const AttentionProblem& problem, const AttentionInputs& inputs, const Prepared& w,
         const AttentionOutputs& out, FlashArch arch) {
  const TwinSizes& z = w.z;
  const bool backward = problem.shape.backward;
  const int dtype = static_cast<int>(problem.shape.dtype);
  TwinBuffers b{to_device(inputs.q, dtype), to_device(inputs.k, dtype), to_device(inputs.v, dtype),
                to_device(inputs.d_o, dtype), std::vector<float>(z.q_elems(), 0.0f),
                std::vector<float>(z.lse_elems(), -INFINITY), {}, {}, {}, {}};
  if (backward) {
    b.delta.assign(z.lse_elems(), 0.0f);
    b.dq.assign(z.q_elems(), 0.0f), b.dk.assign(z.kv_elems(), 0.0f), b.dv.assign(z.kv_elems(), 0.0f);
  }
  const AttentionBwdParams p = make_params(problem, z, w.md, b);
  forward_pass(p, arch);
  copy_out(b.o, out.o, dtype);  // o already holds dtype values
  copy_lse_out(b.lse, z, out.lse);
  if (!backward) return;
  backward_passes(p);
  copy_out(b.dq, out.dq, dtype);
  copy_out(b.dk, out.dk, dtype);
  copy_out(b.dv, out.dv, dtype);
}

}  // namespace

std::optional<Error> attention_twin_into(const AttentionProblem& problem, const AttentionInputs& inputs,
                                         const AttentionOutputs& out, FlashArch arch) {
  auto prepared = prepare(problem, inputs);
  if (!prepared) return prepared.error();
  if (auto e = check_output_buffers(out, prepared->z.q_elems(), prepared->z.kv_elems(), problem.shape.backward)) return e;
  run(problem, inputs, prepared.value(), out, arch);
  return std::nullopt;
}

Expected<AttentionResult> attention_twin(const AttentionProblem& problem, const AttentionInputs& inputs,
                                         FlashArch arch) {
  auto prepared = prepare(problem, inputs);
  if (!prepared) return prepared.error();
  const TwinSizes& z = prepared->z;
  AttentionResult r;
  r.o.assign(z.q_elems(), 0.0);
  r.lse.assign(z.lse_elems(), -INFINITY);
  AttentionOutputs out{r.o.data(), r.lse.data()};
  if (problem.shape.backward) {
    r.grads = AttentionGradients{std::vector<double>(z.q_elems()), std::vector<double>(z.kv_elems()),
                                 std::vector<double>(z.kv_elems())};
    out.dq = r.grads->dq.data(), out.dk = r.grads->dk.data(), out.dv = r.grads->dv.data();
  }
  run(problem, inputs, prepared.value(), out, arch);
  return r;
}

}  // namespace attn_oracle::gpu
