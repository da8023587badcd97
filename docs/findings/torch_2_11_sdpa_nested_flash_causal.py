"""Reproduction of attention/matchesReference on attn_oracle.stacks.torch_sdpa:FlashJagged
(written by `python -m attn_oracle repro` from fixtures/stacks/torch_2_11_sdpa_nested_flash_causal_bottom_right.case.json).
Input: attention causal M=1 | q ids [[1, 1]] pos [[0, 1]] | kv ids [[1]] pos [[0]]
Input: fp16, heads 1/1, head_dim 8, forward
Differs: o: FAIL, worst element 6: backend 0 vs reference 0.88623, error 0.88623 > budget 0.001 = 2 x naive error 0 + eps 0.001, ratio 886.23
Found on torch 2.11.0+cu130 on an NVIDIA H100 (written on a CPU from torch 2.15.0's same nested flash
path over a FlashAttention-2 stand-in); needs a CUDA device (flash). Exit 1 (AssertionError) while it differs.
"""

import numpy as np

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention


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


def nested_sdpa(q, k, v, q_ids, kv_ids, mask, scale, dtype):
    """SDPA's flash backend with each document (a run of one id, positions from 0) of each row one
    sequence of a jagged nested tensor, ``is_causal`` for the causal masks; o as [R, T, H, D]."""
    half = {"fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
    groups = q.shape[2] // k.shape[2]
    seqs, where = [], []
    for r in range(q_ids.shape[0]):
        for doc in sorted(set(q_ids[r][q_ids[r] != 0].tolist()) & set(kv_ids[r][kv_ids[r] != 0].tolist())):
            qi, ki = np.flatnonzero(q_ids[r] == doc), np.flatnonzero(kv_ids[r] == doc)
            seqs.append((q[r, qi], np.repeat(k[r, ki], groups, 1), np.repeat(v[r, ki], groups, 1)))
            where.append((r, qi))
    def nested(side):  # [N, j, H, D] -> [N, H, j, D]
        return torch.nested.nested_tensor([torch.from_numpy(s[side]).to("cuda", half) for s in seqs],
                                          layout=torch.jagged).transpose(1, 2)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        o = scaled_dot_product_attention(nested(0), nested(1), nested(2), is_causal="causal" in mask, scale=scale)
    out = np.zeros(q.shape)
    for (r, qi), x in zip(where, o.transpose(1, 2).unbind()):
        out[r, qi] = x.double().cpu().numpy()
    return {"o": out}


q_ids = np.array([[1, 1]])
q_pos = np.array([[0, 1]])
kv_ids = np.array([[1]])
kv_pos = np.array([[0]])
mask = 'causal'
window = (-1, -1)
max_segments = 1
heads_q, heads_kv, head_dim = 1, 1, 8
scale = 0.35355339059327373
dtype = 'fp16'  # the values below are exact in it
backward = False
q = np.array([[[[0.7666015625, -0.136962890625, -0.947265625, 0.94189453125, -0.787109375, -0.345458984375, -0.65234375, 0.54296875]], [[-0.5087890625, 0.904296875, -0.20703125, 0.52197265625, 0.04791259765625, 0.1103515625, 0.41650390625, 0.036956787109375]]]])  # [R, T, H, D]
k = np.array([[[[-0.0221710205078125, 0.52978515625, -0.5908203125, 0.6884765625, 0.7109375, 0.3203125, 0.85888671875, -0.341552734375]]]])  # [R, T, H, D]
v = np.array([[[[0.73046875, 0.1513671875, -0.174072265625, -0.49365234375, 0.27294921875, 0.86181640625, 0.88623046875, -0.56640625]]]])  # [R, T, H, D]
do = None

got = nested_sdpa(q, k, v, q_ids, kv_ids, mask, scale, dtype)

# Floats: max |got - expected| must stay within k * e + eps, where expected is the float64
# reference, e the error of a naive run in the same precision and eps the dtype's floor
# (docs/semantics.md#6-tolerance; k = 2 for o and lse, 3 for gradients), computed when this was
# written.
budgets = {"o": 0.001}
expected = {
    'o': np.array([[[[0.73046875, 0.1513671875, -0.174072265625, -0.49365234375, 0.27294921875, 0.86181640625, 0.88623046875, -0.56640625]], [[0.73046875, 0.1513671875, -0.174072265625, -0.49365234375, 0.27294921875, 0.86181640625, 0.88623046875, -0.56640625]]]]),
}
differs = compare(got, expected, budgets)
assert not differs, f"{', '.join(differs)} differ from the reference"
print('PASS')
