// conformance_test.cpp: the conformance suite (conformance/) on this build's own
// backends. The properties and their parameters come from the object library.
#include "attn_oracle/seam/backend.hpp"
#include "builtin_backends.hpp"

namespace {
const bool kBuiltinsRegistered = (attn_oracle::register_builtin_backends(), true);
}
