// oracle.cpp: see oracle.hpp.
#include "attn_oracle/oracle.hpp"

namespace attn_oracle {
namespace {
Oracle current;
}  // namespace

const Oracle& oracle() { return current; }

ScopedOracle::ScopedOracle(Oracle replacement) : previous_(current) { current = replacement; }
ScopedOracle::~ScopedOracle() { current = previous_; }

}  // namespace attn_oracle
