// validate.hpp: input validation with the stable codes of
// docs/semantics.md#input-validation-in-precedence-order.
//
// Precedence: whole-input checks first (mask/window come from the case reader,
// then max_segments, ranks, shapes, extra dims); then broadcast rows in row-major
// order, the q side before the kv side of each row, and inside one side of one
// row the first *code* in precedence order that applies anywhere in it (the
// message names the first token with that violation). So [1,2,1] with M=1 is
// noncontiguous_segment, not too_many_segments.
//
// The reference's own validator; the production twins re-implement it in one pass
// and are compared with it code for code.
#pragma once

#include "attn_oracle/model/error.hpp"
#include "attn_oracle/model/packed_batch.hpp"

namespace attn_oracle::inline model {

// Shape checks only (the whole-input codes); gives the layout on success.
Expected<BatchLayout> validate_shapes(const PackedBatch& batch);

// Every check of docs/semantics.md#input-validation-in-precedence-order.
Expected<BatchLayout> validate(const PackedBatch& batch);

}  // namespace attn_oracle::model
