"""Reproduction of attention/matchesReference on attn_oracle.stacks.megatron:TrainingEodMaskBackend
(written by `python -m attn_oracle repro` from fixtures/stacks/megatron_ltor_mask_two_eods_raise.case.json).
Input: attention causal M=3 | q ids [[1, 2, 3]] pos [[0, 0, 0]] | kv ids [[1, 2, 3]] pos [[0, 0, 0]]
Input: fp32, heads 1/1, head_dim 1, forward
Differs: the worker's backend raised RuntimeError in attention: The size of tensor a (2) must match the size of tensor b (0) at non-singleton dimension 0
Found on megatron-core 0.19.2 (torch 2.15.0+cu132); runs on a CPU. Exit 1 (AssertionError) while it differs.
"""

import numpy as np

import torch
from megatron.training.utils import get_ltor_masks_and_position_ids
from torch.nn.functional import scaled_dot_product_attention

EOD, PAD, TEXT = 2, 3, 7  # token ids: end of document, a pad token no sample holds, any other


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


def _runs(ids_row: np.ndarray) -> list[tuple[int, int, int]]:
    """(start, end, id) of each run of one id along a row."""
    cut = np.flatnonzero(np.diff(ids_row)) + 1
    bounds = [0, *cut.tolist(), len(ids_row)]
    return [(a, b, int(ids_row[a])) for a, b in zip(bounds, bounds[1:])]


def eod_tokens(ids_row: np.ndarray) -> np.ndarray:
    """Token ids of one sample: each document's last token is EOD, except the row's last document
    (it runs off the sample's end); the extra label token Megatron reads after the sample is
    appended (``add_extra_token_to_sequence``)."""
    text = np.full(len(ids_row) + 1, TEXT, dtype=np.int64)
    for a, b, _ in _runs(ids_row)[:-1]:
        text[b - 1] = EOD
    return text


def training_ltor_masks(ids: np.ndarray):
    """Megatron's attention mask [B, 1, T, T] (True = masked) and position ids from the public
    ``megatron.training.utils.get_ltor_masks_and_position_ids``, for rows ``ids`` whose documents
    end with EOD, with a pad token distinct from EOD (the one place this module calls it)."""
    from megatron.training.utils import get_ltor_masks_and_position_ids

    data = torch.from_numpy(np.stack([eod_tokens(row)[:-1] for row in ids]))
    mask, _, positions = get_ltor_masks_and_position_ids(
        data, EOD, PAD, reset_position_ids=True, reset_attention_mask=True, eod_mask_loss=False,
        pad_mask_loss=False)
    return mask, positions


def sdpa_under_mask(masked, q, k, v, scale, do=None):
    """torch's SDPA under a Megatron mask (True = masked) on float64 [R, T, H, D] arrays: o, the lse
    [R, Hq, Tq] of the same masked scores and, with ``do``, dq, dk, dv by autograd."""
    attends = ~masked.reshape(q.shape[0], 1, q.shape[1], k.shape[1])  # SDPA: True = attends

    def heads_first(a, grad):  # [R, T, H, D] -> [R, H, T, D]
        return torch.from_numpy(np.ascontiguousarray(np.transpose(a, (0, 2, 1, 3)), np.float64)).requires_grad_(grad)

    def tokens_first(t):
        return t.detach().transpose(1, 2).numpy()

    tq, tk, tv = (heads_first(t, do is not None) for t in (q, k, v))
    o = scaled_dot_product_attention(tq, tk, tv, attn_mask=attends, scale=scale, enable_gqa=q.shape[2] != k.shape[2])
    groups = q.shape[2] // k.shape[2]
    scores = tq.detach() @ tk.detach().repeat_interleave(groups, 1).transpose(-1, -2) * scale
    out = {"o": tokens_first(o), "lse": torch.logsumexp(scores.masked_fill(~attends, float("-inf")), -1).numpy()}
    if do is not None:
        o.backward(heads_first(do, False))
        out.update(dq=tokens_first(tq.grad), dk=tokens_first(tk.grad), dv=tokens_first(tv.grad))
    return out


q_ids = np.array([[1, 2, 3]])
q_pos = np.array([[0, 0, 0]])
kv_ids = np.array([[1, 2, 3]])
kv_pos = np.array([[0, 0, 0]])
mask = 'causal'
window = (-1, -1)
max_segments = 3
heads_q, heads_kv, head_dim = 1, 1, 1
scale = 1.0
dtype = 'fp32'  # the values below are exact in it
backward = False
q = np.array([[[[0.7666215896606445]], [[-0.1369440108537674]], [[-0.9471324682235718]]]])  # [R, T, H, D]
k = np.array([[[[0.9417639374732971]], [[-0.7873066067695618]], [[-0.3453484773635864]]]])  # [R, T, H, D]
v = np.array([[[[-0.6522642970085144]], [[0.5430930852890015]], [[-0.5086221098899841]]]])  # [R, T, H, D]
do = None

attention_mask, position_ids = training_ltor_masks(q_ids)  # True = masked
got = {**sdpa_under_mask(attention_mask, q, k, v, scale, do), "attention_mask": attention_mask.numpy(),
       "position_ids": position_ids.numpy()}

# Floats: max |got - expected| must stay within k * e + eps, where expected is the float64
# reference, e the error of a naive run in the same precision and eps the dtype's floor
# (docs/semantics.md#6-tolerance; k = 2 for o and lse, 3 for gradients), computed when this was
# written.
budgets = {"o": 1e-05, "lse": 1.0028487107783804e-05}
expected = {
    'o': np.array([[[[-0.6522642970085144]], [[0.5430930852890015]], [[-0.5086221098899841]]]]),
    'lse': np.array([[[0.7219765668308469, 0.10781692450269365, 0.3270907557626259]]]),
    'attention_mask': np.array([[[[False, True, True], [True, False, True], [True, True, False]]]]),  # in the stack's terms
    'position_ids': np.array([[0, 0, 0]]),  # in the stack's terms
}
differs = compare(got, expected, budgets)
assert not differs, f"{', '.join(differs)} differ from the reference"
print('PASS')
