"""A CPU stand-in for FlashAttention-2's varlen kernel inside torch, for testing the
torch_varlen and xformers mappings on a machine without CUDA.

Importing it registers CPU kernels for ``aten::_flash_attention_forward`` and
``aten::_flash_attention_backward`` (which torch builds for CUDA only), so that
``torch.nn.attention.varlen.varlen_attn`` runs its own Python, custom op and
autograd unchanged on CPU tensors and only the kernel is this one. It follows
FA2's documented conventions, written here from them and sharing no code with
the reference:

- sequence b holds queries ``[cum_q[b], cum_q[b+1])`` and keys ``[cum_k[b], cum_k[b+1])``;
- the window is anchored bottom-right: key j of a sequence of lq queries and lk
  keys is visible to query i when ``i + lk - lq - left <= j <= i + lk - lq + right``;
  ``is_causal`` sets right to 0; a side >= ``max_k`` is dropped, and a -1 side
  whose other side is bounded reads ``max_k`` (FA2's ``set_params_fprop``);
- GQA: query head h reads key head ``h // (H / H_k)``;
- a query with no visible key: o = 0, lse = +inf;
- lse is float32, ``[H, total_q]``; o is in the input dtype, computed in float64;
- the backward reads the ``out`` and ``lse`` it is given (a block of a larger attention, as a
  ring's backward passes them, gets that attention's probabilities);
- q, k and v must have a unit stride on their last dimension, empty ones too
  (FA2's input check: "Input tensor must have contiguous last dimension").
"""
import torch

__all__ = ["visible", "forward", "forward_hook"]

forward_hook = None  # a test may set it: called with the forward's arguments the library passed


def _sides(max_k: int, is_causal: bool, left, right):
    left = -1 if left is None else int(left)
    right = -1 if right is None else int(right)
    if left >= max_k:
        left = -1
    if right >= max_k:
        right = -1
    if is_causal:
        right = 0
    if left < 0 and right >= 0:
        left = max_k
    if left >= 0 and right < 0:
        right = max_k
    return left, right


def visible(lq: int, lk: int, max_k: int, is_causal: bool, left, right) -> torch.Tensor:
    """[lq, lk] bool: which keys each query of one sequence sees."""
    left, right = _sides(max_k, is_causal, left, right)
    i = torch.arange(lq).unsqueeze(1)
    j = torch.arange(lk).unsqueeze(0)
    shift = i + lk - lq
    ok = torch.ones(lq, lk, dtype=torch.bool)
    if left >= 0:
        ok &= j >= shift - left
    if right >= 0:
        ok &= j <= shift + right
    return ok


def _probabilities(q, k, seen, scale):
    """[H, lq, lk] float64 softmax over the visible keys (0 where none), and lse [H, lq] (+inf there)."""
    scores = torch.einsum("ihd,jhd->hij", q, k) * scale
    scores = scores.masked_fill(~seen, float("-inf"))
    lse = torch.logsumexp(scores, -1)
    p = torch.where(seen, torch.exp(scores - torch.where(torch.isinf(lse), 0.0, lse).unsqueeze(-1)), 0.0)
    return p, torch.where(torch.isinf(lse), torch.inf, lse)


def _sequences(cum_q, cum_k, max_k, is_causal, left, right):
    for b in range(len(cum_q) - 1):
        qa, qz, ka, kz = int(cum_q[b]), int(cum_q[b + 1]), int(cum_k[b]), int(cum_k[b + 1])
        yield slice(qa, qz), slice(ka, kz), visible(qz - qa, kz - ka, max_k, is_causal, left, right)


def _attend(q, k, v, cum_q, cum_k, max_k, is_causal, scale, left, right):
    """float64 o [Tq, H, D] and lse [H, Tq] (+inf where nothing is visible)."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    o, lse = torch.zeros_like(q), torch.full((q.shape[1], q.shape[0]), torch.inf, dtype=q.dtype)
    for qs, ks, seen in _sequences(cum_q, cum_k, max_k, is_causal, left, right):
        p, lse[:, qs] = _probabilities(q[qs], k[ks], seen, scale)
        o[qs] = torch.einsum("hij,jhd->ihd", p, v[ks])
    return o, lse


def _gradients(do, q, k, v, out, lse, cum_q, cum_k, max_k, is_causal, scale, left, right):
    """float64 dq, dk, dv by the closed form from the ``out`` and ``lse`` the caller passes, as FA2's
    backward reads them: a block of a larger attention (a ring step) gets that attention's
    probabilities exp(s - lse) and its rows' sum(do * out), not its own softmax."""
    groups = q.shape[1] // k.shape[1]
    kr, vr = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(kr), torch.zeros_like(vr)
    for qs, ks, seen in _sequences(cum_q, cum_k, max_k, is_causal, left, right):
        row_lse = lse[:, qs].unsqueeze(-1)  # [H, lq, 1]; +inf where the query sees nothing
        scores = torch.einsum("ihd,jhd->hij", q[qs], kr[ks]) * scale
        p = torch.where(seen & torch.isfinite(row_lse), torch.exp(scores - torch.where(torch.isinf(row_lse), 0.0, row_lse)), 0.0)
        dv[ks] += torch.einsum("hij,ihd->jhd", p, do[qs])
        dp = torch.einsum("ihd,jhd->hij", do[qs], vr[ks])
        ds = p * (dp - (do[qs] * out[qs]).sum(-1).transpose(0, 1).unsqueeze(-1))
        dq[qs] = torch.einsum("hij,jhd->ihd", ds, kr[ks]) * scale
        dk[ks] += torch.einsum("hij,ihd->jhd", ds, q[qs]) * scale
    fold = lambda g: g.reshape(g.shape[0], k.shape[1], groups, g.shape[2]).sum(2)  # noqa: E731
    return dq, fold(dk), fold(dv)


def _check_last_dim(*tensors):
    for t in tensors:
        if t.stride(-1) != 1:
            raise RuntimeError("Input tensor must have contiguous last dimension")


def forward(query, key, value, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, return_debug_mask,
            *, scale=None, window_size_left=None, window_size_right=None, seqused_k=None, alibi_slopes=None):
    assert dropout_p == 0.0 and seqused_k is None and alibi_slopes is None, "the stand-in takes none of these"
    _check_last_dim(query, key, value)
    if cum_seq_q.numel() < 2:  # FA2's check (seen on the H100, torch 2.11): a call of no sequence
        raise RuntimeError("batch size must be positive")
    if forward_hook is not None:
        forward_hook({"is_causal": is_causal, "window_size_left": window_size_left,
                      "window_size_right": window_size_right, "max_q": max_q, "max_k": max_k})
    f64 = [t.detach().to(torch.float64) for t in (query, key, value)]
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    o, lse = _attend(*f64, cum_seq_q.tolist(), cum_seq_k.tolist(), max_k, is_causal, scale,
                     window_size_left, window_size_right)
    rng = torch.zeros(2, dtype=torch.uint64)
    return o.to(query.dtype), lse.to(torch.float32), rng, torch.empty(0, dtype=torch.uint64), torch.empty(0)


def backward(grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal,
             rng_state, unused, *, scale=None, window_size_left=None, window_size_right=None):
    f64 = [t.detach().to(torch.float64) for t in (grad_out, query, key, value, out, logsumexp)]
    scale = query.shape[-1] ** -0.5 if scale is None else scale
    grads = _gradients(*f64, cum_seq_q.tolist(), cum_seq_k.tolist(), max_k, is_causal, scale,
                       window_size_left, window_size_right)
    return tuple(g.to(t.dtype) for g, t in zip(grads, (query, key, value)))


_LIBRARY = torch.library.Library("aten", "IMPL")  # kept alive: the registration lasts as long as this object
_LIBRARY.impl("_flash_attention_forward", forward, "CPU")
_LIBRARY.impl("_flash_attention_backward", backward, "CPU")
