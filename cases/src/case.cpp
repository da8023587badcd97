// case.cpp: see case.hpp.
#include "attn_oracle/cases/case.hpp"

namespace attn_oracle::inline cases {

const AttentionCase* attention_fields(const CasePayload& payload) {
  if (auto* a = std::get_if<AttentionCase>(&payload)) return a;
  if (auto* s = std::get_if<SmallSeqCase>(&payload)) return s;
  if (auto* sh = std::get_if<ShardingCase>(&payload)) return std::get_if<AttentionCase>(&sh->call);
  if (auto* cp = std::get_if<ContextParallelCase>(&payload)) return &cp->call;
  return nullptr;
}

AttentionCase* attention_fields(CasePayload& payload) {
  return const_cast<AttentionCase*>(attention_fields(static_cast<const CasePayload&>(payload)));
}

nlohmann::json error_to_json(const Error& e) {
  return {{"error", {{"code", std::string(to_string(e.code))}, {"message", e.message}}}};
}

}  // namespace attn_oracle::cases
