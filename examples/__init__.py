"""Example backends for attn-oracle's process protocol (docs/protocol.md).

From the repository root: ``attn-oracle check --backend
'exec:python3 -m attn_oracle.worker examples.numpy_backend:Backend'`` (with
``PYTHONPATH=python``). The package installs them as ``attn_oracle.examples``:
``python -m attn_oracle check attn_oracle.examples.numpy_backend:Backend`` runs
anywhere. Their imports of each other are relative, so both names work.
"""
