// kv_buffer_generators.hpp: RapidCheck generators and checks of the shared K/V
// buffer (docs/semantics.md#3-metadata), kept small so that ctest stays fast: 1..4 document
// lengths of 1..40 tokens (short ones and length-1 documents weighted in)
// tiling N = k - 1 micro-sequences of m tokens plus a last one of 1..m (k in
// 1..8 with m in 1..20, or k in 1..40 with m in 1..4; k = 1 puts m past N),
// heads_kv 1..2 with groups {1, 2}
// (heads_q <= 4), head_dim {8, 16, 64} (those of the domain when it names them;
// 64 because the CUDA kernels instantiate nothing smaller), fp32, fp16 or bf16
// (those of the domain, shrinking towards fp32), backward. Low precision is drawn
// because the CUDA kernels store nothing else: with fp32 alone, or head dims 8 and
// 16 alone, the `cuda` backend declined every draw on a device. Each micro-sequence's dK/dV comes out rounded to the dtype
// and is added into the fp32 gradient buffer, so a buffer row can carry several
// roundings where the single-pass budget of docs/semantics.md#6-tolerance counts one. On the
// CPU twin the worst error / budget was 0.69-0.81 over 4 seeds of 1000 draws
// (0.03-0.06 with fp32 alone): inside the budget, with a thinner margin.
// A failing draw shrinks by dropping and shortening documents and towards fewer,
// shorter micro-sequences; N follows k and m down, so the pair shrinks together
// (to N <= 3 with m <= 2 for every planted bug).
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>
#include <rapidcheck.h>

#include "attn_oracle/seam/backend.hpp"
#include "attn_oracle/seam/input_domain.hpp"
#include "attn_oracle/model/kv_buffer.hpp"

namespace attn_oracle::inline properties {

struct CheckRecord;  // property_check.hpp

struct KvBufferDraw {
  KvBufferProblem problem;
  uint64_t seed = 0;  // generate_kv_buffer_inputs(problem, seed)
};

rc::Gen<KvBufferDraw> kv_buffer_draw(const InputDomain& domain = {});
void showValue(const KvBufferDraw& draw, std::ostream& os);
// The state machine of kv_buffer/stepsMatchModel (kv_buffer_state_machine.cpp):
// a command sequence drawn for the problem, recorded as strings ("WriteSlice(2)",
// "WriteOutside", "Attend", "Backward"); and the check that runs one (the
// canonical schedule when `steps` is null: every slice written, a write past the
// end, forward in order, backward in reverse); its tolerance checks are noted in `record`.
nlohmann::json draw_kv_buffer_steps(const KvBufferDraw& draw);
void check_kv_buffer_steps(Backend& backend, const KvBufferDraw& draw, const nlohmann::json* steps, CheckRecord& record);

}  // namespace attn_oracle::properties
