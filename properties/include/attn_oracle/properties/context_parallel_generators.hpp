// context_parallel_generators.hpp: RapidCheck generators of context-parallel
// calls (docs/semantics.md#91-context-parallelism), aimed at the classes of bug the
// stacks that ship context parallelism keep meeting:
//  - a layout inside the backend's domain: strategy, balance, cp of 2, 3, 4, 8
//    (and 1), stripes of 1, 2, 3, 64 and 128 (the long ones with cp = 2 and
//    one row); shrinks towards all_gather, contiguous, cp = 2, stripe 1;
//  - rows of documents whose lengths sit at, one below and one above the
//    layout's unit (2*cp, cp*stripe, (cp-1)*stripe, cp), 1-token and odd
//    documents, documents that start or end on a chunk or stripe boundary
//    and ones that straddle it; padding between documents, at the tail and,
//    under head_tail, after each document up to a multiple of 2*cp (what
//    cu_seqlens_padded describes); several documents a row, rows of different
//    structure;
//  - positions restarting per document, continuing through padding, counted
//    over the row (positions a stack generates itself) or offset;
//  - every mask kind the domain takes, windows for token-level backends only
//    (a kernel backend's blocks carry no positions: seam/context_parallel.hpp);
//  - a valid layout first; then its preconditions (row and span lengths) are met
//    by growing documents or their padding, so a draw always runs.
// Invalid draws break one precondition of one valid draw and carry the code it
// must give (context_parallel.hpp's order).
//
// Checked by tests/context_parallel_test.cpp: valid draws pass validate_cp,
// invalid ones give exactly their code, the mix covers every class above.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <rapidcheck.h>

#include "attn_oracle/cases/case_file.hpp"
#include "attn_oracle/model/attention.hpp"
#include "attn_oracle/model/context_parallel.hpp"
#include "attn_oracle/seam/input_domain.hpp"

namespace attn_oracle::inline properties {

struct CpDraw {
  CpLayout layout;
  AttentionProblem problem;  // [B, T] self-attention
  uint64_t seed = 0;         // generate_inputs(problem, seed)
};

struct InvalidCpDraw {
  CpDraw draw;
  ErrorCode expected;
};

struct CpOptions {
  InputDomain domain;
  bool windows = true;    // false for backends whose ranks run kernels
  bool backward = true;   // false for backends without gradients
};

rc::Gen<CpDraw> cp_draw(const CpOptions& options);
rc::Gen<InvalidCpDraw> invalid_cp_draw(const CpOptions& options);

// The op context_parallel case of a draw (data by seed).
Case cp_case(const CpDraw& draw);

// The bug classes a problem holds under its layout ("document one above 2*cp",
// "padding between documents", ...), for the coverage a run prints.
std::vector<std::string> cp_classes(const CpLayout& layout, const AttentionProblem& problem);

void showValue(const CpDraw& draw, std::ostream& os);
void showValue(const InvalidCpDraw& draw, std::ostream& os);

}  // namespace attn_oracle::properties
