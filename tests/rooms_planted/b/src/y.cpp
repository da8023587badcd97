// Planted: room b opens a plain attn_oracle namespace.
#include "attn_oracle/b/y.hpp"
namespace attn_oracle {
}  // namespace attn_oracle
