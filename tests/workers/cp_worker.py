"""Context-parallel workers for tests/context_parallel_worker_test.cpp and
tests/python_worker.cmake: ``python3 tests/workers/cp_worker.py NAME`` serves
the class NAME, each examples/numpy_context_parallel_backend.py with one thing
changed (the repository and python/ on PYTHONPATH):

- Hooks: every optional op, each answering so that a test sees whose answer it
  got: validate_cp_layout takes stripes up to 2 only, cp_reorder negates, a ring
  promises a balance of 1.5, and 8 ranks are declined (unsupported_context_parallel);
- FlatPermutation, FloatPermutation, NotAPermutation: cp_permutation of shape
  [B*T], of float64, and with slot 1 holding slot 0's token;
- ShortOutput: cp_attention's o one token short;
- BadOpsHello, BadDomainHello: a raw hello listing an optional op that does not
  exist, or a cp balance that does not exist (attn_oracle.worker would not write either).
"""
import os
import sys

import numpy as np

from attn_oracle import _protocol, serve
from attn_oracle.errors import AttnOracleError
from examples.numpy_context_parallel_backend import Backend


class Hooks(Backend):
    name = "cp-hooks"

    def validate_cp_layout(self, layout, problem):
        t = problem.batch.q_segment_ids.shape[-1]
        if t % layout.cp:
            raise AttnOracleError("cp_not_divisible", f"the worker: T = {t} is not a multiple of cp = {layout.cp}")
        if layout.balance == "striped" and layout.stripe > 2:
            raise AttnOracleError("cp_bad_layout", f"the worker: stripe {layout.stripe}; this worker takes stripes up to 2")

    def cp_permutation(self, layout, problem):
        self.validate_cp_layout(layout, problem)  # the suite does not validate for a worker that validates
        return super().cp_permutation(layout, problem)

    def cp_reorder(self, layout, problem, values, width, inverse):
        perm = self.cp_permutation(layout, problem)
        row = np.arange(len(perm))[:, None]
        out = np.empty_like(values)
        if inverse:
            out[row, perm] = values
        else:
            out[:] = values[row, perm]
        return -out

    def cp_balance_bound(self, layout, problem):
        return 1.5 if layout.strategy == "ring" else None

    def unsupported_context_parallel(self, layout, problem):
        return "8 ranks: this worker runs up to 4" if layout.cp == 8 else None


class FlatPermutation(Backend):
    def cp_permutation(self, layout, problem):
        return super().cp_permutation(layout, problem).reshape(-1)


class FloatPermutation(Backend):
    def cp_permutation(self, layout, problem):
        return super().cp_permutation(layout, problem).astype(np.float64)


class NotAPermutation(Backend):
    def cp_permutation(self, layout, problem):
        perm = super().cp_permutation(layout, problem).copy()
        perm[0, 1] = perm[0, 0]
        return perm


class ShortOutput(Backend):
    def cp_attention(self, layout, problem, inputs):
        out = super().cp_attention(layout, problem, inputs)
        return {**out, "o": out["o"][:, :-1]}


RAW_HELLOS = {
    "BadOpsHello": {"context_parallel_ops": ["validate_cp_layout", "cp_teleport"]},
    "BadDomainHello": {"domain": {"cp_balances": ["contiguous", "sideways"]}},
}

if __name__ == "__main__":
    name = sys.argv[1]
    if name in RAW_HELLOS:
        stdout = os.fdopen(1, "wb")
        _protocol.write_frame(stdout, {"protocol": "attn-oracle-worker/1", "name": name, "version": "0",
                                       "capabilities": ["context_parallel"], **RAW_HELLOS[name]})
        os.fdopen(0, "rb").read()
    else:
        serve(globals()[name]())
