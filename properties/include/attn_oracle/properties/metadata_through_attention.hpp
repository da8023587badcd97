// metadata_through_attention.hpp: metadata judged by what it does to attention.
//
// A varlen (THD) kernel never sees segment ids: it reads document s's queries at
// ragged_offsets_q[s] for cu_seqlens_q[s+1] - cu_seqlens_q[s] tokens, its keys
// likewise, and applies the index rule inside those runs. consume_metadata() is
// that kernel in float64 (one head, scale 1/sqrt(D)). Driven by a backend's
// metadata and by the reference's, over inputs holding NaN in every token that
// no document of the reference holds, the two results must be equal bit for
// bit: a wrong integer shows as the NaN it lets in, the keys of the next row it
// reads, or the tail of a document it drops, and the message names the first
// output it changes and the metadata field behind it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "attn_oracle/model/kv_buffer.hpp"
#include "attn_oracle/model/metadata.hpp"
#include "attn_oracle/model/packed_batch.hpp"

namespace attn_oracle::inline properties {

// Packed tokens of one head: q [q_tokens, dim], k and v [kv_tokens, dim].
struct VarlenInputs {
  int64_t q_tokens = 0, kv_tokens = 0, dim = 0;
  std::vector<double> q, k, v;
};

struct VarlenOutputs {
  std::vector<double> o;    // [q_tokens, dim]; 0 where no document writes
  std::vector<double> lse;  // [q_tokens]; -inf where no key is attended
};

// The kernel's view of `md`: cu_seqlens and ragged offsets only. A document
// whose runs leave the tensors gives an error naming the field and values, the
// out-of-bounds read a kernel would make.
std::variant<VarlenOutputs, std::string> consume_metadata(const Metadata& md, MaskKind mask, Window window,
                                                          const VarlenInputs& in);

// Deterministic inputs for `batch` (values in [-1, 1) from the token index),
// NaN in every q and kv token outside the reference metadata's documents.
VarlenInputs poisoned_inputs(const PackedBatch& batch, const Metadata& reference, int64_t dim = 4);

// nullopt when `got` drives attention exactly as `want` does; else one line: the
// first output that differs and the metadata field that explains it.
std::optional<std::string> attention_difference(const PackedBatch& batch, const Metadata& got, const Metadata& want);

// The same for a micro-sequence of a shared K/V buffer of `buffer_tokens`
// tokens: the kernel reads its queries at cu_seqlens_q and its keys at
// first_document_begin + cu_seqlens_k, bottom-right causal per document. The
// buffer holds NaN outside the reference's [first_document_begin, end), so a
// wrong start or length reads the poison, an earlier document, or past the end.
std::optional<std::string> micro_sequence_attention_difference(int64_t buffer_tokens, const MicroSequenceMetadata& got,
                                                               const MicroSequenceMetadata& want);

// The attend step of a backend that serves only micro_sequence: `got` drives the
// same kernel over a clean buffer and over one with tokens [0,
// want.first_document_begin) NaN. nullopt when no output bit changes; else the
// first output the earlier documents reach, or the out-of-bounds read.
std::optional<std::string> micro_sequence_prefix_influence(int64_t buffer_tokens, const MicroSequenceMetadata& got,
                                                           const MicroSequenceMetadata& want);

}  // namespace attn_oracle::properties
