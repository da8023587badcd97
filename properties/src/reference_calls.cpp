// reference_calls.cpp: see reference_calls.hpp.
#include "attn_oracle/properties/reference_calls.hpp"

namespace attn_oracle::inline properties {
namespace {
ReferenceCalls current;
}  // namespace

const ReferenceCalls& reference_calls() { return current; }

ScopedReferenceCalls::ScopedReferenceCalls(ReferenceCalls replacement) : previous_(current) { current = replacement; }
ScopedReferenceCalls::~ScopedReferenceCalls() { current = previous_; }

}  // namespace attn_oracle::properties
