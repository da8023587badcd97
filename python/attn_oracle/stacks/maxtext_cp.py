"""MaxText's load-balancing reorder for context parallelism (maxtext 0.2.5): the token order each
rank's shard of a batch holds, judged as the permutation and the reorder of context parallelism.

MaxText reorders a batch once, in its input pipeline, when ``context_parallel_load_balance``
is on (``train_utils``: ``maxtext_utils.get_reorder_callable`` ->
``max_utils.reorder_causal_load_balanced(batch, cp_size, reorder_strategy, hardware)``),
then shards the sequence dim over the context axis: rank r holds slots [r*L, (r+1)*L).
Three functions write that order; each class calls one:

- ``DualChunkSwap``: ``reorder_causal_load_balanced(..., ReorderStrategy.DUAL_CHUNK_SWAP,
  hardware="cpu")``, the CPU and TPU path: ``max_utils.reorder_sequence`` on every
  reordered key of the batch (``inputs_segmentation``, ``inputs_position``, ...). The
  inverse is ``reorder_sequence(..., to_contiguous=True)``, what the attention op runs
  to put K/V back in row order before Splash attention.
- ``MaskDualChunkSwap``: ``max_utils.reorder_mask_load_balancing(np.arange(T), cp, 0)``,
  the query order the load-balanced Splash masks bake in
  (``attention_op._load_balanced_q_sequence``); NumPy, forward only (no ``cp_reorder``:
  the suite applies the permutation).
- ``GpuDualChunkSwap`` and ``GpuStriped``: ``reorder_causal_load_balanced(...,
  hardware="gpu")``, MaxText's GPU path, which maps its strategy onto
  TransformerEngine's ``reorder_causal_load_balancing`` (``DualChunkSwap`` / ``Striped``)
  with no ``stripe_size`` (TE's default, stripe 1). Where TE's native library does
  not import (a CPU machine), TE's ``attention.py`` is the private copy
  attn_oracle.stacks.te_jax_cp loads, put in ``sys.modules`` for MaxText's import only.

Methods: ``cp_permutation`` (the function on a [B, T] int32 arange under the key
``inputs_segmentation``, seq dim 1: slot s holds row token perm[s]); ``cp_reorder`` (the
forward function, or the inverse where MaxText has one, on an int32 index tensor of the
values' shape [B, T, W], the float64 values then taken at those indices: exact, where
JAX without x64 would hold them in float32). MaxText builds no per-rank THD metadata of its
own (its GPU context parallelism is TransformerEngine's: attn_oracle.stacks.te_jax_cp;
on TPU, Splash masks). Not served: ``cp_rank_metadata``, ``cp_rank_attention`` and
``cp_attention`` (MaxText reorders the batch only: its per-rank kernels are TransformerEngine's on
GPU and Splash masks on TPU); the classes do not define them, and the suite skips the properties
that call them, with that reason.

Conventions: none to map (MaxText's order is the contract's: dual_chunk_swap rank r
holds chunks r and 2*cp-1-r of 2*cp, striped stripe i on rank i mod cp, within a rank in
row order). A ValueError of MaxText's for a row that does not split ("is not a multiple
of") is the suite's ``cp_not_divisible``.

Declined (python/tests/test_stack_maxtext_cp.py tries each against MaxText), said by
each class's domain: an odd cp for dual_chunk_swap (``reorder_sequence`` and
``reorder_mask_load_balancing`` raise "cp_size=3 must be a multiple of 2"; on the GPU path
TE's ``reorder_causal_dual_chunk_swap`` does); a stripe other than 1 for ``GpuStriped``
(MaxText passes none); striped on the CPU path (``reorder_causal_load_balanced`` raises
"STRIPED reorder strategy requires Transformer Engine and is only supported on GPU"),
which is why striped is a GPU class; extra dims (context parallelism splits [B, T] rows).

Findings (docs/stacks.md): ``reorder_causal_load_balanced``'s docstring shows the
dual-chunk-swap order of TE's ReorderStrategy docstring ("GPU1: [4, 5, 10, 11]" for 16
tokens on 4 ranks), which neither function produces (both give [2, 3, 12, 13], as the
contract and ``reorder_sequence``'s own docstring do): a documentation error, the code
agrees with the contract.
"""

from __future__ import annotations

import importlib
import sys
from contextlib import contextmanager

import numpy as np

from . import require
from ..errors import AttnOracleError, Unsupported
from ._cp_common import cp_domain

maxtext = require("MaxText", "maxtext.utils.max_utils", "maxtext", checked=("0.2.5",))
import jax.numpy as jnp  # noqa: E402

__all__ = ["DualChunkSwap", "MaskDualChunkSwap", "GpuDualChunkSwap", "GpuStriped"]

# MaxText's words (and TE's, on its GPU path) for a row that does not split into the chunks or stripes
NOT_DIVISIBLE = ("is not a multiple of", "is multiple of cp_size*stripe_size")
KEY = "inputs_segmentation"  # one of the batch keys MaxText reorders (max_utils._reorder_keys)


@contextmanager
def _transformer_engine():
    """MaxText's GPU path imports TE's reorder: the installed TE where it imports, else te_jax_cp's private copy."""
    try:
        importlib.import_module("transformer_engine.jax.attention")
        yield
        return
    except Exception:  # noqa: BLE001 - no native library here: TE's own file, loaded without it
        pass
    from .te_jax_cp import _te

    name = "transformer_engine.jax.attention"
    saved = sys.modules.get(name)
    sys.modules[name] = _te()[0]
    try:
        yield
    finally:
        if saved is None:
            sys.modules.pop(name, None)
        else:
            sys.modules[name] = saved


class _Reorder:
    strategy_name = ""  # MaxText's ReorderStrategy member
    hardware = "cpu"
    balance = ""

    def __init__(self):
        from . import installed_version
        from maxtext.common.common_types import ReorderStrategy
        from maxtext.utils import max_utils

        self.version = installed_version("maxtext")
        self.max_utils = max_utils
        self.strategy = getattr(ReorderStrategy, self.strategy_name) if self.strategy_name else None

    def unsupported_context_parallel(self, layout, problem):
        if int(layout.cp) < 1 or int(layout.stripe) < 1:
            return None  # a malformed layout: the suite's validation gives it cp_bad_layout, as it must
        d = self.domain
        if layout.balance not in d.cp_balances or layout.strategy not in d.cp_strategies:
            return f"{type(self).__name__} is MaxText's {d.cp_balances[0]} reorder ({', '.join(d.cp_strategies)})"
        if int(layout.cp) not in d.cp_sizes:
            if d.cp_balances == ("dual_chunk_swap",) and int(layout.cp) % 2:
                return f"cp = {layout.cp}: MaxText's dual-chunk-swap reorder raises 'cp_size={layout.cp} must be a multiple of 2'"
            return f"cp = {layout.cp}: outside the sizes checked ({', '.join(map(str, d.cp_sizes))})"
        if d.cp_stripes and int(layout.stripe) not in d.cp_stripes:
            return f"stripe = {layout.stripe}: MaxText hands TE no stripe_size (TE's default, 1)"
        if np.asarray(problem.batch.q_segment_ids).ndim != 2:
            return "extra dims: context parallelism splits [B, T] rows"
        return None

    def _declined(self, layout, problem):
        reason = self.unsupported_context_parallel(layout, problem)
        if reason:
            raise Unsupported(reason)

    def _forward(self, layout, x):
        """MaxText's batch reorder on x [B, T, ...] (int32) under a key it reorders."""
        batch = {KEY: jnp.asarray(x, jnp.int32)}
        if self.hardware == "gpu":
            with _transformer_engine():
                return self.max_utils.reorder_causal_load_balanced(batch, int(layout.cp), self.strategy, "gpu")[KEY]
        return self.max_utils.reorder_causal_load_balanced(batch, int(layout.cp), self.strategy, self.hardware)[KEY]

    def _call(self, fn, *args):
        try:
            return np.asarray(fn(*args))
        except ValueError as e:
            if any(words in str(e) for words in NOT_DIVISIBLE):  # the row's length, not cp, does not split
                raise AttnOracleError("cp_not_divisible", f"MaxText: {e}") from None
            raise

    def cp_permutation(self, layout, problem):
        self._declined(layout, problem)
        rows, t = np.asarray(problem.batch.q_segment_ids).shape
        return self._call(self._forward, layout, np.broadcast_to(np.arange(t), (rows, t))).astype(np.int64)



def _exact(values, shape, index_fn):
    """``values`` ([B, T, W], ``shape``) float64 reordered by ``index_fn`` on an int32 index tensor of that shape."""
    given = np.asarray(values, np.float64)
    index = index_fn(np.arange(given.size).reshape(shape))
    return given.reshape(-1)[np.asarray(index).reshape(-1)].reshape(given.shape)


_SELF_ROWS = dict(self_attention_only=True, extra_dims=False)  # context parallelism's own rule, no stack's
# MaxText's load balancing serves its all-gather and ring strategies (base.yml context_parallel_strategy)
_STRATEGIES = ("all_gather", "ring")


class DualChunkSwap(_Reorder):
    """``reorder_causal_load_balanced`` on the CPU/TPU path (``reorder_sequence``), its inverse to_contiguous."""

    name = "maxtext-cp-dual-chunk-swap"
    strategy_name, hardware, balance = "DUAL_CHUNK_SWAP", "cpu", "dual_chunk_swap"
    domain = cp_domain(**_SELF_ROWS, cp_strategies=_STRATEGIES, cp_balances=("dual_chunk_swap",), cp_sizes=(2, 4, 8))

    def cp_reorder(self, layout, problem, values, width, inverse):
        self._declined(layout, problem)
        if inverse:  # what the attention op runs on K/V (seq dim 1 here)
            def fn(x):
                return self.max_utils.reorder_sequence(jnp.asarray(x, jnp.int32), int(layout.cp), 1, True)
        else:
            def fn(x):
                return self._forward(layout, x)
        rows, t = np.asarray(problem.batch.q_segment_ids).shape
        return _exact(values, (rows, t, int(width)), lambda index: self._call(fn, index))


class MaskDualChunkSwap(_Reorder):
    """``reorder_mask_load_balancing`` (NumPy): the query order of the load-balanced Splash masks."""

    name = "maxtext-cp-mask-dual-chunk-swap"
    hardware, balance = "numpy", "dual_chunk_swap"
    domain = cp_domain(**_SELF_ROWS, cp_strategies=_STRATEGIES, cp_balances=("dual_chunk_swap",), cp_sizes=(2, 4, 8))

    def _forward(self, layout, x):
        # as attention_op._load_balanced_q_sequence: one [T] arange, seq dim 0; each row the same
        rows, t = x.shape
        order = self.max_utils.reorder_mask_load_balancing(np.arange(t), int(layout.cp), 0)
        return np.take_along_axis(np.asarray(x), np.broadcast_to(order, (rows, t)), axis=1)


class GpuDualChunkSwap(_Reorder):
    """``reorder_causal_load_balanced(..., DUAL_CHUNK_SWAP, hardware="gpu")``: TE's DualChunkSwap through MaxText."""

    name = "maxtext-cp-gpu-dual-chunk-swap"
    strategy_name, hardware, balance = "DUAL_CHUNK_SWAP", "gpu", "dual_chunk_swap"
    domain = cp_domain(**_SELF_ROWS, cp_strategies=_STRATEGIES, cp_balances=("dual_chunk_swap",), cp_sizes=(2, 4, 8))


class GpuStriped(_Reorder):
    """``reorder_causal_load_balanced(..., STRIPED, hardware="gpu")``: TE's Striped with its default stripe 1."""

    name = "maxtext-cp-gpu-striped"
    strategy_name, hardware, balance = "STRIPED", "gpu", "striped"
    # MaxText packs with CP on GPU only as the load-balanced ring (attention_op.cudnn_flash_attention);
    # the reorder itself does not depend on the strategy
    domain = cp_domain(**_SELF_ROWS, cp_strategies=_STRATEGIES, cp_balances=("striped",), cp_sizes=(2, 3, 4, 8),
                       cp_stripes=(1,))
