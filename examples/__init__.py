"""Example backends for attn-oracle's process protocol (docs/protocol.md).

From the repository root: ``attn-oracle check --backend
'exec:python3 -m attn_oracle.worker examples.numpy_backend:Backend'`` (with
``PYTHONPATH=python``).
"""
