"""Reproduction: TransformerEngine JAX 2.20.2, context parallelism, all-gather with striped load
balancing on THD: a rank's run that continues the positions of the token before it gets a length
and no offset (docs/findings/te-jax-2.20-cp-all-gather-run-offsets.md).

Calls the four helpers FusedAttnCPStripedWithAllGatherFwdPrimitive's impl calls on each rank
(cpp_extensions/attention.py, _FusedAttnCPWithAllGatherHelper) on rank 0's shard of one row,
prints each expected against got, and ends in an AssertionError while they differ. Run it where
`transformer_engine.jax` imports (a CUDA machine with transformer-engine-jax): the helpers are
jax.numpy, no kernel runs.

The row: document 1 of one token, document 2 of seven, positions from 0, no padding;
cp = 2, stripe_size = 1, max_segments_per_seq = 2. As a user lays it out
(reorder_causal_load_balancing(..., ReorderStrategy.Striped, cp_size=2, seq_dim=1, stripe_size=1),
then the sequence sharded over the cp axis), rank 0 holds row tokens 0, 2, 4, 6:
ids [1, 2, 2, 2] at positions [0, 1, 3, 5]; the all-gathered (and inverse-reordered) kv row is
ids [1, 2, 2, 2, 2, 2, 2, 2] at positions [0, 0, 1, 2, 3, 4, 5, 6].
"""

import numpy as np

import jax.numpy as jnp
from transformer_engine.jax.cpp_extensions.attention import _FusedAttnCPWithAllGatherHelper

q_ids = jnp.asarray([[1, 2, 2, 2]], jnp.int32)  # rank 0's shard (kv shard: the same tokens)
q_pos = jnp.asarray([[0, 1, 3, 5]], jnp.int32)
kv_ids_ag = jnp.asarray([[1, 2, 2, 2, 2, 2, 2, 2]], jnp.int32)  # the gathered row, row order
kv_pos_ag = jnp.asarray([[0, 0, 1, 2, 3, 4, 5, 6]], jnp.int32)
# get_adjusted_max_segments_per_seq: max_seqlen // (stripe_size * cp_size) + max_segments_per_seq
segments = 8 // (1 * 2) + 2

# Four runs on rank 0 (a run: consecutive positions of one document): token 0 (document 1),
# tokens 1, 2, 3 (document 2, positions 1, 3, 5: each its own run). Each run's queries start at
# its local token; its keys are its document's gathered tokens up to its last position.
expected = {
    "q_seqlens": [[1, 1, 1, 1, -1, -1]],
    "q_seqoffsets": [[0, 1, 2, 3, -1, -1]],
    "kv_seqlens": [[1, 2, 4, 6, -1, -1]],
    "kv_seqoffsets": [[0, 1, 1, 1, -1, -1]],
}

helper = _FusedAttnCPWithAllGatherHelper(None, None)  # these four read neither the mesh nor the config
got = {
    "q_seqlens": helper.q_seqlens_for_striped_for_rank(q_ids, q_pos, segments),
    "q_seqoffsets": helper.q_seqoffsets_for_striped_for_rank(q_ids, q_pos, segments),
    "kv_seqlens": helper.kv_seqlens_for_striped_for_rank(q_ids, q_pos, segments),
    "kv_seqoffsets": helper.kv_seqoffsets_for_striped_for_rank(q_pos, q_ids, kv_pos_ag, kv_ids_ag, segments),
}
differs = []
for name, want in expected.items():
    have = np.asarray(got[name])
    ok = have.tolist() == want
    print(f"{name}: {'ok' if ok else 'DIFFERS'}")
    if not ok:
        print(f"  expected {want}\n  got      {have.tolist()}")
        differs.append(name)
assert not differs, f"{', '.join(differs)} differ: a run has a length and no offset"
