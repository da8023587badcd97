"""attn_oracle: a float64 test oracle and property-based conformance suite for packed attention."""

from .errors import AttnOracleError, Unsupported

__all__ = ["AttnOracleError", "Unsupported"]
