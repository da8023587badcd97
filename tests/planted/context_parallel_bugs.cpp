// context_parallel_bugs.cpp: the planted context-parallel bugs, each
// SimulatedContextParallel over the float64 reference with one override, each
// modelled on a bug a stack that ships context parallelism has had:
//  - head_tail_chunks_cut_over_the_row: head_tail splits the row into 2*cp
//    chunks instead of each document (per-token tables indexed without the
//    document's offset);
//  - padding_counted_as_tokens: a rank's metadata counts the padding after a
//    document as that document's tokens (tail padding read as tokens);
//  - rank_cu_seqlens_divided_by_cp: a rank's metadata is the row's with every
//    cu_seqlens entry divided by cp (`cu_seqlens // cp`);
//  - document_tail_truncated: a document's last (length mod 2*cp) tokens are
//    dropped from the run without a word (a document length not a multiple of
//    2*cp silently truncated);
//  - ring_merge_keeps_the_larger_lse: the ring merge keeps the partial with the
//    larger lse instead of rescaling both (an lse correction left out);
//  - ring_step_meets_rank_r_plus_s: ring step s meets the keys of rank
//    (r + s) mod cp, the send and receive directions swapped;
//  - causal_tail_on_one_rank: the load balancer keeps the contiguous split,
//    so the last rank gets the whole causal tail, while promising balance;
//  - head_tail_accepts_documents_off_2cp: head_tail's validation lets a
//    document that is not a multiple of 2*cp through.
#include <algorithm>
#include <limits>

#include "attn_oracle/reference/attention.hpp"
#include "attn_oracle/reference/metadata.hpp"
#include "attn_oracle/seam/context_parallel.hpp"
#include "planted/planted_backends.hpp"

namespace attn_oracle::planted {
namespace {

// The permutation of `instead` where a valid layout asks for one of `planted_for`.
Expected<std::vector<int64_t>> permutation_instead(CpLayout l, const AttentionProblem& p,
                                                   std::initializer_list<CpBalance> planted_for, CpBalance instead) {
  if (!validate_cp(l, p) && std::find(planted_for.begin(), planted_for.end(), l.balance) != planted_for.end())
    l.balance = instead;
  return cp_permutation(l, p);
}

class HeadTailChunksCutOverTheRow final : public SimulatedContextParallel {
 public:
  using SimulatedContextParallel::SimulatedContextParallel;
  Expected<std::vector<int64_t>> permutation(const CpLayout& l, const AttentionProblem& p) override {
    return permutation_instead(l, p, {CpBalance::head_tail}, CpBalance::dual_chunk_swap);
  }
};

class PaddingCountedAsTokens final : public SimulatedContextParallel {
 public:
  using SimulatedContextParallel::SimulatedContextParallel;
  Expected<Metadata> rank_metadata(const CpLayout& l, const AttentionProblem& p, int64_t rank, int64_t step) override {
    const Expected<CpRankProblem> rp = rank_problem(l, p, rank, step);
    if (!rp) return rp.error();
    PackedBatch batch = rp->problem.batch;
    for (PackedSide* side : {&batch.q, &batch.kv}) {
      const int64_t t = side->segment_ids.shape[1];
      for (size_t i = 0; i < side->segment_ids.data.size(); ++i)
        if (i % t != 0 && side->segment_ids.data[i] == 0 && side->segment_ids.data[i - 1] != 0) {
          side->segment_ids.data[i] = side->segment_ids.data[i - 1];
          side->segment_pos.data[i] = side->segment_pos.data[i - 1] + 1;
        }
    }
    return ref::metadata(batch);
  }
};

class RankCuSeqlensDividedByCp final : public SimulatedContextParallel {
 public:
  using SimulatedContextParallel::SimulatedContextParallel;
  Expected<Metadata> rank_metadata(const CpLayout& l, const AttentionProblem& p, int64_t rank, int64_t step) override {
    if (auto e = validate_cp(l, p)) return *e;
    Expected<Metadata> md = ref::metadata(p.batch);
    if (!md) return md;
    Metadata out = md.value();
    for (std::vector<int64_t>* cu : {&out.cu_seqlens_q, &out.cu_seqlens_kv})
      for (int64_t& x : *cu) x /= l.cp;
    (void)rank, (void)step;
    return out;
  }
};

class DocumentTailTruncated final : public SimulatedContextParallel {
 public:
  using SimulatedContextParallel::SimulatedContextParallel;
  Expected<AttentionResult> cp_attention(const CpLayout& l, const AttentionProblem& p, const AttentionInputs& in) override {
    Expected<AttentionResult> r = SimulatedContextParallel::cp_attention(l, p, in);
    const Expected<std::vector<int64_t>> perm = permutation(l, p);
    if (!r || !perm) return r;
    AttentionResult out = r.value();
    const int64_t t = p.batch.q.segment_ids.shape[1], hq = p.shape.heads_q, d = p.shape.head_dim;
    std::vector<int64_t> slot(perm->size());
    for (size_t s = 0; s < perm->size(); ++s) slot[s / t * t + perm.value()[s]] = static_cast<int64_t>(s % t);
    const std::vector<int64_t>& ids = p.batch.q.segment_ids.data;
    for (size_t i = 0; i < ids.size();) {
      size_t e = i + 1;
      while (e < ids.size() && e % t != 0 && ids[e] == ids[i]) ++e;
      const int64_t dropped = ids[i] == 0 ? 0 : static_cast<int64_t>(e - i) % (2 * l.cp);
      for (size_t k = e - dropped; k < e; ++k) {
        const int64_t row = static_cast<int64_t>(k) / t, s = row * t + slot[k];
        std::fill_n(out.o.begin() + s * hq * d, hq * d, 0.0);
        for (int64_t h = 0; h < hq; ++h) out.lse[(row * hq + h) * t + s % t] = -std::numeric_limits<double>::infinity();
      }
      i = e;
    }
    return out;
  }
};

class RingMergeKeepsTheLargerLse final : public SimulatedContextParallel {
 public:
  using SimulatedContextParallel::SimulatedContextParallel;

 protected:
  void merge_partial(std::vector<double>& o, std::vector<double>& lse, const std::vector<double>& o_part,
                     const std::vector<double>& lse_part, int64_t rows, int64_t tokens, int64_t heads, int64_t d) override {
    for (int64_t b = 0; b < rows; ++b)
      for (int64_t t = 0; t < tokens; ++t)
        for (int64_t h = 0; h < heads; ++h) {
          const int64_t li = (b * heads + h) * tokens + t, oi = ((b * tokens + t) * heads + h) * d;
          if (lse_part[li] <= lse[li]) continue;
          lse[li] = lse_part[li];
          std::copy_n(o_part.begin() + oi, d, o.begin() + oi);
        }
  }
};

class RingStepMeetsRankRPlusS final : public SimulatedContextParallel {
 public:
  using SimulatedContextParallel::SimulatedContextParallel;

 protected:
  Expected<CpRankProblem> rank_problem(const CpLayout& l, const AttentionProblem& p, int64_t rank, int64_t step) override {
    const int64_t swapped = l.strategy == CpStrategy::ring && l.cp > 0 ? (l.cp - step) % l.cp : step;
    return SimulatedContextParallel::rank_problem(l, p, rank, swapped);
  }
};

class CausalTailOnOneRank final : public SimulatedContextParallel {
 public:
  using SimulatedContextParallel::SimulatedContextParallel;
  Expected<std::vector<int64_t>> permutation(const CpLayout& l, const AttentionProblem& p) override {
    return permutation_instead(l, p, {CpBalance::head_tail, CpBalance::dual_chunk_swap}, CpBalance::contiguous);
  }
};

class HeadTailAcceptsDocumentsOff2cp final : public SimulatedContextParallel {
 public:
  using SimulatedContextParallel::SimulatedContextParallel;
  std::optional<Error> validate_layout(const CpLayout& l, const AttentionProblem& p) override {
    std::optional<Error> e = validate_cp(l, p);
    if (e && e->code == ErrorCode::cp_document_not_divisible) return std::nullopt;
    return e;
  }
};

// Every rank runs the reference's metadata and dense attention; the context
// parallelism is `Simulation` over them.
template <class Simulation>
class CpBugBackend final : public Backend, MetadataCapability, AttentionCapability {
 public:
  explicit CpBugBackend(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  MetadataCapability* metadata() override { return this; }
  Expected<Metadata> metadata(const PackedBatch& batch) override { return ref::metadata(batch); }
  AttentionCapability* attention() override { return this; }
  Expected<AttentionResult> attention(const AttentionProblem& p, const AttentionInputs& in) override {
    return ref::attention_dense_masked(p, in);
  }
  bool token_level_mask() const override { return true; }
  ContextParallelCapability* context_parallel() override { return &cp_; }

 private:
  std::string name_;
  Simulation cp_{static_cast<AttentionCapability&>(*this), static_cast<MetadataCapability&>(*this)};
};

template <class Simulation>
PlantedBug bug(const std::string& name, const std::string& what, const std::string& property) {
  return {name, property, what, [name] { return std::unique_ptr<Backend>(new CpBugBackend<Simulation>(name)); }};
}

}  // namespace

std::vector<PlantedBug> context_parallel_bugs() {
  const std::string p = "context_parallel/";
  return {
      bug<HeadTailChunksCutOverTheRow>("head_tail_chunks_cut_over_the_row",
                                       "head_tail cuts the row into 2*cp chunks instead of each document",
                                       p + "permutationIsTheLayoutsBijection"),
      bug<PaddingCountedAsTokens>("padding_counted_as_tokens",
                                  "a rank's metadata counts the padding after a document as its tokens",
                                  p + "rankMetadataMatchesTheOracle"),
      bug<RankCuSeqlensDividedByCp>("rank_cu_seqlens_divided_by_cp",
                                    "a rank's metadata is the row's with cu_seqlens divided by cp",
                                    p + "rankMetadataMatchesTheOracle"),
      bug<DocumentTailTruncated>("document_tail_truncated",
                                 "a document's tokens past a multiple of 2*cp are dropped from the run silently",
                                 p + "runMatchesTheUnshardedReference"),
      bug<RingMergeKeepsTheLargerLse>("ring_merge_keeps_the_larger_lse",
                                      "the ring merge keeps the partial with the larger lse instead of rescaling both",
                                      p + "runMatchesTheUnshardedReference"),
      bug<RingStepMeetsRankRPlusS>("ring_step_meets_rank_r_plus_s",
                                   "ring step s meets the keys of rank (r + s) mod cp instead of (r - s) mod cp",
                                   p + "ringStepsMergeToTheReference"),
      bug<CausalTailOnOneRank>("causal_tail_on_one_rank",
                               "the load balancer keeps the contiguous split (the last rank takes the causal tail) "
                               "while promising balance",
                               p + "balanceWithinTheDeclaredBound"),
      bug<HeadTailAcceptsDocumentsOff2cp>("head_tail_accepts_documents_off_2cp",
                                          "head_tail's validation lets a document that is not a multiple of 2*cp through",
                                          p + "invalidLayoutsAreRejectedExactly"),
  };
}

}  // namespace attn_oracle::planted
