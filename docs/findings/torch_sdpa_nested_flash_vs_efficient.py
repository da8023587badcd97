"""SDPA on one nested (jagged) input, is_causal=True, under the flash and the efficient backends: a
sequence of 2 queries and 1 key. SDPA documents is_causal as top-left, so both queries see the key and
o == v for both. Needs a CUDA device (exit 2 without one); exit 1 where the two backends differ.
Not yet run on a GPU."""
import sys
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.functional import scaled_dot_product_attention as sdpa

if not torch.cuda.is_available():
    print("NOT RUN: needs a CUDA device")
    sys.exit(2)

torch.manual_seed(0)
nt = lambda n: torch.nested.nested_tensor([torch.randn(n, 1, 8)], layout=torch.jagged, device="cuda",  # noqa: E731
                                          dtype=torch.float16).transpose(1, 2)  # [1, heads 1, j, 8]
q, k, v = nt(2), nt(1), nt(1)
out = {}
for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION):
    with sdpa_kernel(backend):
        out[backend.name] = sdpa(q, k, v, is_causal=True).transpose(1, 2).values()[:, 0]  # [2 queries, 8]
print(f"torch {torch.__version__}\nv (the key's value) {v.transpose(1, 2).values()[0, 0].tolist()}")
for name, o in out.items():
    print(f"{name:19s} query 0 {o[0].tolist()}\n{'':19s} query 1 {o[1].tolist()}")
same = torch.allclose(out["FLASH_ATTENTION"], out["EFFICIENT_ATTENTION"], atol=1e-3)
print("PASS: the backends agree" if same else "FAIL: flash and efficient differ on the same call")
sys.exit(0 if same else 1)
