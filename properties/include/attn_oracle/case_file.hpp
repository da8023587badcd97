// case_file.hpp: `attn-oracle.case/1` JSON case files (DESIGN section 9).
//
// A case is one op and its inputs. `metadata`, `attention` and `small_seq` (the
// attention fields, DESIGN section 6) are modelled here, `kv_buffer` in
// kv_buffer_case.hpp, `sharding` (mesh, specs, then shapes or the attention
// fields) in sharding_case.hpp. An optional `expected` field holds the result a
// fixture pins (the result JSON or {"error": {...}}); `note` says where the case
// came from.
//
// Reading never throws: malformed files give Error{bad_case | bad_mask | bad_window}
// naming the field.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "attn_oracle/attention.hpp"
#include "attn_oracle/error.hpp"
#include "attn_oracle/kv_buffer.hpp"
#include "attn_oracle/metadata.hpp"
#include "attn_oracle/packed_batch.hpp"
#include "attn_oracle/sharding.hpp"
#include "attn_oracle/small_seq.hpp"

namespace attn_oracle {

inline constexpr const char* kCaseSchema = "attn-oracle.case/1";

enum class CaseOp { metadata, attention, small_seq, kv_buffer, sharding };
std::string_view to_string(CaseOp op);

struct Case {
  CaseOp op = CaseOp::metadata;
  PackedBatch batch;
  // attention and small_seq only:
  AttentionShape attention;
  std::optional<uint64_t> data_seed;       // data: {"seed": N}
  std::optional<AttentionInputs> tensors;  // tensors: {q, k, v, do}
  // kv_buffer only (kv_buffer_case.hpp): the sequence, m and the attention shape;
  // its data is `data: {"seed": N}` (data_seed).
  KvBufferProblem kv_buffer;
  // sharding only (sharding_case.hpp): mesh and specs; shapes when the case only
  // validates, else the batch and attention fields above give them.
  Sharding sharding;
  std::optional<ShardedShapes> sharding_shapes;
  std::optional<nlohmann::json> expected;
  std::string note;
};

Expected<Case> case_from_json(const nlohmann::json& j);
Expected<Case> read_case_file(const std::string& path);
nlohmann::json case_to_json(const Case& c);
bool write_case_file(const std::string& path, const Case& c);

// The attention problem and inputs of an attention or small_seq case (tensors or seeded data).
AttentionProblem attention_problem(const Case& c);
Expected<AttentionInputs> attention_inputs(const Case& c);

// Results as `attn-oracle eval` prints them.
nlohmann::json metadata_to_json(const Metadata& md);
nlohmann::json attention_result_to_json(const AttentionProblem& problem, const AttentionResult& r);
// o [..][B][Tq][Hq][D], p [docs][Hq][16] and, with backward, dq, dk, dv.
nlohmann::json small_seq_result_to_json(const AttentionProblem& problem, const SmallSeqResult& r);
nlohmann::json error_to_json(const Error& e);  // {"error": {"code", "message"}}

}  // namespace attn_oracle
