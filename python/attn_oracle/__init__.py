"""attn_oracle: a float64 test oracle and property-based conformance suite for packed attention.

- :mod:`attn_oracle.oracle`: the float64 reference on NumPy arrays (metadata,
  explicit masks, attention forward and backward, small-seq, the K/V buffer).
- :mod:`attn_oracle.cases`: case files (read, write, iterate, evaluate).
- :mod:`attn_oracle.tolerance`: the tolerance rule on a backend's outputs.
- :mod:`attn_oracle.adapters`: FlashAttention, cuDNN, PyTorch and
  TransformerEngine arguments to and from our packed batch.
- :mod:`attn_oracle.packing`: the batch helpers a backend's glue needs (rows,
  valid tokens, document spans to metadata fields).
- :mod:`attn_oracle.stacks`: ready backends for the stacks people run
  (docs/stacks.md).
- ``python -m attn_oracle check MODULE:CLASS``: the C++ property suite against a
  Python backend (:mod:`attn_oracle.cli`); ``serve`` is the worker side, and
  ``Layout`` the context-parallel layout its ``cp_*`` methods are given.
- The pytest plugin (:mod:`attn_oracle.pytest_plugin`): one test per property.

docs/python.md is the guide; errors carry the stable codes of docs/semantics.md.
"""

from .errors import AttnOracleError, Unsupported

_LAZY = {
    # The extension, loaded on first use, so that `import attn_oracle` (the
    # worker, the errors) works without it.
    "metadata": "oracle", "explicit_mask": "oracle", "representability": "oracle", "attention": "oracle",
    "small_seq": "oracle", "Metadata": "oracle", "AttentionResult": "oracle", "SmallSeqResult": "oracle",
    "kv_buffer_metadata": "oracle", "kv_buffer_stream": "oracle", "MicroSequence": "oracle",
    "Case": "cases", "read_case": "cases", "write_case": "cases", "iter_cases": "cases", "eval_case": "cases",
    "metadata_case": "cases", "attention_case": "cases",
    "judge": "tolerance", "Verdict": "tolerance", "TensorCheck": "tolerance",
    "serve": "worker", "Layout": "worker", "Domain": "domain",
}

__all__ = ["AttnOracleError", "Unsupported", *_LAZY]


def __getattr__(name):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'attn_oracle' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
