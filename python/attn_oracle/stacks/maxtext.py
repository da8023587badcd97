"""MaxText's attention op (maxtext.layers.attention_op.AttentionOp, MaxText 0.2.5), its
``dot_product`` kernel on the default backend (``hardware=gpu`` where there is one), with segment ids.

The op is built as MaxText's Attention layer builds it (``AttentionOp(config,
mesh, attention_kernel="dot_product", ...)``) from a config of MaxText's own
``pyconfig.initialize`` over its ``configs/base.yml`` (``hardware=cpu``, or ``gpu`` on a GPU), on a
one-device mesh. Each call goes through ``AttentionOp.apply_attention`` with
``decoder_segment_ids`` / ``decoder_segment_ids_kv`` in train mode; it returns
the unnormalised output with each query's max and sum of exponentials, so the
module also reads lse = max + log(sum) off the stack.

Domain: self-attention with positions from 0 in every document. MaxText's
causal mask is built on token indices (``col <= row``), its layer type is the
causal one (``AttentionType.GLOBAL``) or, for the kinds without a causal term,
``AttentionType.FULL``; under self-attention the bottom-right kinds are the
top-left ones. Declined: windows (MaxText's sliding window is a per-layer size
fixed when the op is built, with an exclusive left bound: ``sliding_window_size
= W`` is our ``(W - 1, 0)``).

Conventions mapped:

- padding is an ordinary segment to MaxText: tokens with id 0 attend each
  other. The suite's padding queries attend nothing, so their output is zeroed
  and their lse set to -inf.
- a query that attends nothing (no key of its document) gets, like jax.nn, the
  mean of its row's values and an lse near -2.4e38 (masked logits are -0.7 x the
  float32 maximum): o = 0 and lse = -inf there.
- scale: the op does not scale (MaxText's Attention layer scales the query
  before it); the module multiplies q by the scale inside the differentiated
  function.
- lse is in the input dtype (``lse_dtype = "input"``): max and sum come back in it.
- fp32 matmuls: MaxText's own ``matmul_precision: "highest"`` (its einsums'
  ``precision``). The suite judges fp32 as fp32, while the default precision
  multiplies fp32 in TF32 on a GPU (``jax.lax.Precision.DEFAULT``: "uses
  tensorfloat32 if available"), which put jax.nn and Flax 12-15x over their
  fp32 budgets on an H100. Precision acts on fp32 only; on a CPU it changes
  nothing.

Startup builds MaxText's config once per worker (about 20 s on this machine).
"""

from __future__ import annotations

import os
import tempfile
from functools import partial
from pathlib import Path

import numpy as np

from . import require
from ._jax_common import check, empty_as_ours, outputs, rows, tensors, with_vjp
from attn_oracle import Domain
from attn_oracle.domain import framework_dtypes, is_causal

maxtext = require("MaxText", "maxtext.layers.attention_op", "maxtext", checked=("0.2.5",))
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

__all__ = ["Backend"]


def _config():
    from maxtext.configs import pyconfig

    import maxtext as package

    base = Path(package.__file__).parent / "configs" / "base.yml"
    out = Path(tempfile.gettempdir()) / "attn-oracle-maxtext"
    hardware = "gpu" if jax.default_backend() == "gpu" else "cpu"
    return pyconfig.initialize(["", str(base)], run_name="attn-oracle", hardware=hardware, attention="dot_product",
                               enable_checkpointing=False, skip_jax_distributed_system=True, matmul_precision="highest",
                               per_device_batch_size=1, base_output_directory=str(out))


class Backend:
    name = "maxtext-attention-op"
    version = None
    lse_dtype = "input"
    # fp16 too: MaxText's einsums ask for no precision preset, so XLA:CPU compiles them under jit
    domain = Domain(self_attention_only=True, positions_from_zero=True, windows=False)
    map_empty = True  # False: the stack's own answer for a query that attends nothing
    map_padding = True  # False: padding queries keep what MaxText gives them (they attend each other)

    def __init__(self):
        from jax.sharding import Mesh

        from maxtext.common.common_types import AttentionType
        from maxtext.layers.attention_op import AttentionOp
        from flax import nnx

        from . import installed_version

        self.version = installed_version("maxtext")
        self.config = _config()
        self.mesh = Mesh(np.asarray(jax.devices()[:1]).reshape([1] * len(self.config.mesh_axes)),
                         self.config.mesh_axes)
        self._types = {"causal": AttentionType.GLOBAL, "full": AttentionType.FULL}
        self._make = lambda heads_q, heads_kv, length, kind, dt: AttentionOp(  # noqa: E731
            config=self.config, mesh=self.mesh, attention_kernel="dot_product", max_target_length=length,
            num_query_heads=heads_q, num_kv_heads=heads_kv, dtype=dt, attention_type=self._types[kind],
            rngs=nnx.Rngs(0))
        self._compiled = {}

    def _function(self, heads_q, heads_kv, length, kind, dt, backward):
        key = (heads_q, heads_kv, length, kind, dt, backward)
        if key not in self._compiled:
            op = self._make(heads_q, heads_kv, length, kind, dt)
            map_empty, map_padding = self.map_empty, self.map_padding

            def forward(q, k, v, q_ids, kv_ids, scale):
                q = (q.astype(jnp.float32) * scale).astype(q.dtype)
                out, top, total = op.apply_attention(
                    query=q, key=k, value=v, decoder_segment_ids=q_ids, decoder_segment_ids_kv=kv_ids,
                    segment_positions=None, lengths=None, model_mode="train", use_ragged_attention=False,
                    qk_product_einsum=op.AqtEinsum_0, wv_product_einsum=op.AqtEinsum_1)  # as AttentionOp.__call__
                o = (out / total).astype(q.dtype)  # [R, Tq, Hq, D]
                lse = (top + jnp.log(total))[..., 0].astype(jnp.float32)  # [R, Tq, Hq]
                if map_empty:  # padding queries too, unless map_padding is off (they attend each other)
                    o, lse = empty_as_ours(o, lse, (q_ids == 0)[:, :, None] & map_padding)
                return o, lse

            @jax.jit
            def run(q, k, v, do, q_ids, kv_ids, scale):
                return with_vjp(lambda q, k, v: forward(q, k, v, q_ids, kv_ids, scale), q, k, v, do, backward)

            self._compiled[key] = run
        return self._compiled[key]

    def attention(self, p, x):
        check(p.batch)
        q, k, v, do = tensors(p, x)
        q_ids, _, kv_ids, _ = rows(p.batch)
        kind = "causal" if is_causal(p.batch.mask) else "full"
        dt = framework_dtypes(jnp)[p.dtype]  # AttentionOp's dtype, as jnp names it
        run = self._function(p.heads_q, p.heads_kv, max(q_ids.shape[1], kv_ids.shape[1]), kind, dt, p.backward)
        o, lse, grads = run(q, k, v, do, jnp.asarray(q_ids, jnp.int32), jnp.asarray(kv_ids, jnp.int32),
                            np.float32(p.effective_scale))
        return outputs(p, o, lse, grads)
