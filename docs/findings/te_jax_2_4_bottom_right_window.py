"""Reproduction of metadata/matchesReference on attn_oracle.stacks.te_jax:Backend
(written by `python -m attn_oracle repro` from fixtures/stacks/te_jax_2_4_bottom_right_window_two_tokens.case.json).
Input: metadata padding_causal_bottom_right window (np.int64(-1), np.int64(0)) M=1 | q ids [[1, 0]] pos [[0, 0]] | kv ids [[1, 1]] pos [[0, 1]]
Differs: kv_seqlens[0, 0]: backend 1, reference 2
TE's metadata code is Python (transformer_engine/jax/attention.py): run this where `transformer_engine.jax` imports (a CUDA machine with transformer-engine-jax). Exit 1 (AssertionError) while it differs.
"""

import numpy as np

import jax.numpy as jnp
from transformer_engine.jax import attention  # TE's public module


def field(result, name):
    return result[name] if isinstance(result, dict) else getattr(result, name)


def compare(got, expected, budgets=None):
    """Prints expected against got for every field; returns the fields that differ."""
    differs = []
    for name, want in expected.items():
        have = np.asarray(field(got, name))
        want = np.asarray(want)
        if budgets and name in budgets:
            same = have.shape == want.shape and np.array_equal(np.isinf(have), np.isinf(want)) and \
                np.array_equal(have[np.isinf(have)], want[np.isinf(want)])
            error = np.max(np.abs(np.where(np.isinf(want), 0, have - want)), initial=0.0) if same else np.inf
            ok = bool(same and error <= budgets[name])
            print(f"{name}: {'ok' if ok else 'DIFFERS'} (max |got - expected| {error:.3g}, budget {budgets[name]:.3g})")
        else:
            ok = have.shape == want.shape and np.array_equal(have, want)
            print(f"{name}: {'ok' if ok else 'DIFFERS'}")
        if not ok:
            print(f"  expected {want.tolist()}\n  got      {have.tolist()}")
            differs.append(name)
    return differs


def te_seqlens_and_offsets(attention, q_ids, kv_ids, q_pos, kv_pos, mask_type, window, max_segments):
    """TE's per-slot seqlens and offsets of a packed THD batch: the one place this module asks TE for them."""
    descriptor = attention.SequenceDescriptor.from_segment_ids_and_pos((q_ids, kv_ids), (q_pos, kv_pos))
    (q_len, kv_len), (q_off, kv_off) = descriptor.get_seqlens_and_offsets(
        mask_type, attention.QKVLayout.THD_THD_THD, window, max_segments)
    return {"q_seqlens": q_len, "kv_seqlens": kv_len, "q_offsets": q_off, "kv_offsets": kv_off}


q_ids = np.array([[1, 0]])
q_pos = np.array([[0, 0]])
kv_ids = np.array([[1, 1]])
kv_pos = np.array([[0, 1]])
mask = 'padding_causal_bottom_right'
window = (-1, 0)
max_segments = 1

got = te_seqlens_and_offsets(attention, *(jnp.asarray(a, jnp.int32) for a in (q_ids, kv_ids, q_pos, kv_pos)), attention.AttnMaskType.PADDING_CAUSAL_BOTTOM_RIGHT_MASK, None if window == (-1, -1) else window, max_segments)

# The reference's answer (docs/semantics.md#3-metadata), compared exactly.
expected = {
    'kv_offsets': np.array([[0, -1]]),
    'kv_seqlens': np.array([[2]]),
    'q_offsets': np.array([[0, -1]]),
    'q_seqlens': np.array([[1]]),
}
differs = compare(got, expected)
assert not differs, f"{', '.join(differs)} differ from the reference"
print('PASS')
