"""jax.nn.dot_product_attention(implementation="cudnn") with local_window_size=(0, 0) and no
is_causal: each query should attend its own key only, so o equals v. On jax 0.11.2 with cuDNN 9.19
(H100) a query attends every key after it too. Needs a CUDA GPU (cuDNN); elsewhere it exits 2 and
runs nothing. Exit 1 while the bug is there, 0 when o == v."""

import sys

import numpy as np

import jax
import jax.numpy as jnp

if jax.default_backend() != "gpu":
    print(f"NOT RUN: needs a CUDA GPU for implementation='cudnn' (jax {jax.__version__} sees "
          f"'{jax.default_backend()}')")
    sys.exit(2)

T, N, H = 16, 2, 8  # one row of 16 tokens, 2 heads, head dim 8
rng = np.random.default_rng(0)
q, k, v = (jnp.asarray(rng.uniform(-1, 1, (1, T, N, H)), jnp.float16) for _ in range(3))
lengths = jnp.array([T], jnp.int32)
o = jax.nn.dot_product_attention(q, k, v, query_seq_lengths=lengths, key_value_seq_lengths=lengths,
                                 local_window_size=(0, 0), implementation="cudnn")
got, expected = np.asarray(o, np.float32), np.asarray(v, np.float32)  # window (0, 0): key i alone
wrong = np.unique(np.nonzero(np.abs(got - expected) > 1e-3)[1])
print(f"jax {jax.__version__}: queries whose o is not their own v: {wrong.tolist()}")
for i in wrong[:3]:
    print(f"  query {i}: expected {expected[0, i, 0, :4].tolist()}\n           got      {got[0, i, 0, :4].tolist()}")
print("FAIL" if wrong.size else "PASS")
sys.exit(1 if wrong.size else 0)
