"""A NumPy backend in the shape of a sequence-length API (jax.nn's
query_seq_lengths on cuDNN): each row is read as one sequence of
``count(id != 0)`` tokens from token 0, the causal term and the window act on
token indices, and the window is cuDNN's band (i - W, i]: its right side is
read as 0. Right only inside the domain it declares (one sequence a row,
windows that end at the query, positions from 0, the top-left kinds);
python/tests/test_domain.py checks that the suite draws inside it, and that
``Undeclared``, the same code without those two fields, fails.
"""
import numpy as np

from attn_oracle import Domain
from attn_oracle.domain import TOP_LEFT_KINDS as TOP_LEFT
from examples import numpy_backend


class Backend(numpy_backend.Backend):
    name = "sequence-lengths"
    domain = Domain(positions_from_zero=True, one_sequence_a_row=True, causal_windows_only=True, mask_kinds=TOP_LEFT)

    def attention(self, p, x):
        qi, _, ki, _ = self.checked_attention_rows(p, x)
        q_len, kv_len = (qi != 0).sum(-1), (ki != 0).sum(-1)
        same = qi.max(-1) == ki.max(-1)  # a row whose two sides hold other documents attends nothing
        left = p.batch.window[0]
        out = {"o": np.zeros_like(x.q), "lse": np.full((len(qi), p.heads_q, qi.shape[1]), -np.inf)}
        if p.backward:
            out.update(dq=np.zeros_like(x.q), dk=np.zeros_like(x.k), dv=np.zeros_like(x.v))
        for r in range(len(qi)):
            iq, ik = np.arange(q_len[r]), np.arange(kv_len[r])
            d = iq[:, None] - ik[None, :]
            mask = d >= 0 if "causal" in p.batch.mask or p.batch.window[1] >= 0 else np.ones(d.shape, bool)
            if left >= 0:
                mask &= d <= left
            runs = [(iq, ik, mask)] if same[r] and len(iq) and len(ik) else []
            o, lse, *grads = numpy_backend.attend_documents(x.q[r], x.k[r], x.v[r], x.do[r] if p.backward else None,
                                                            runs, p.effective_scale)
            out["o"][r], out["lse"][r] = o, lse
            if p.backward:
                out["dq"][r], out["dk"][r], out["dv"][r] = grads
        return out


class Undeclared(Backend):
    """The same code, its domain without one_sequence_a_row and causal_windows_only."""

    name = "sequence-lengths-undeclared"
    domain = Domain(positions_from_zero=True, mask_kinds=TOP_LEFT)
