// The correct answer under the twin's name: the float64 reference registered as
// "packed_meta", so that the reproduction written for packed_meta's bug runs
// unchanged against a backend without it (and must pass).
#include <attn_oracle/seam/backend.hpp>
#include <attn_oracle/cases/reference_backend.hpp>

static const bool registered =
    attn_oracle::BackendRegistry::instance().add("packed_meta", attn_oracle::make_reference_backend);
