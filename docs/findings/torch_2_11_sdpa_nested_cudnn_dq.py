"""torch SDPA on nested (jagged) tensors, cuDNN backend, backward: one sequence of N queries and one
key, head dim 8, fp16, no mask. With one key every query's weight on it is 1: o = v and dq = 0
exactly (sending the key twice changes neither).

torch 2.11's _cudnn_attention_backward takes the longest sequences from query.size(2) and
key.size(2), which on the nested path's packed [total, heads, head dim] buffers are head dims; the
fix is pytorch/pytorch pull request #186142 ("Fix cuDNN SDPA varlen backward reading d_qk as
max_seqlen"). If that is the defect, N = 8 (the head dim) passes and N = 9 gets a wrong dq at query
8; on an H100 the suite saw dq -1.27 there. Each call runs in a process of its own under a time
limit, so a hang (seen once on the same path) is reported as one.

Needs a CUDA device with cuDNN; --cpu runs the same calls on torch's math backend on the CPU (a
check of this script, not of cuDNN). Exit 1 when a call is wrong or hangs, 2 when nothing ran.
"""

import json
import subprocess
import sys

import torch

CPU = "--cpu" in sys.argv[1:]
HEAD_DIM, TIME_LIMIT_S = 8, 60


def call(queries: int, keys: int) -> dict:
    """One backward (in a child process): max |o - v| and |dq| of every query."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    device, dtype = ("cpu", torch.float32) if CPU else ("cuda", torch.float16)
    torch.manual_seed(0)
    q0, k0, v0, do0 = (torch.randn(n, 1, HEAD_DIM, dtype=torch.float64) for n in (queries, 1, 1, queries))
    k0, v0 = k0.expand(keys, -1, -1), v0.expand(keys, -1, -1)  # the one key, sent `keys` times
    def nested(x, grad=False):  # a batch of one sequence: [1, j, heads, D] -> [1, heads, j, D]
        return torch.nested.nested_tensor([x.to(device, dtype)], layout=torch.jagged, requires_grad=grad)
    q = nested(q0, grad=True)
    with sdpa_kernel(SDPBackend.MATH if CPU else SDPBackend.CUDNN_ATTENTION):
        o = sdpa(q.transpose(1, 2), nested(k0).transpose(1, 2), nested(v0).transpose(1, 2)).transpose(1, 2)
    (o.values() * do0.to(device, dtype)).sum().backward()  # dO = do0
    got_o, dq = o.values()[:, 0].double().cpu(), q.grad.values()[:, 0].double().cpu()
    return {"o_error": (got_o - v0[0, 0]).abs().max(dim=1).values.tolist(), "dq": dq.abs().max(dim=1).values.tolist()}


def run(queries: int, keys: int) -> tuple[bool, str]:
    args = [sys.executable, __file__, "--child", str(queries), str(keys)] + (["--cpu"] if CPU else [])
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=TIME_LIMIT_S)
    except subprocess.TimeoutExpired:
        return False, f"HANG: no answer in {TIME_LIMIT_S} s"
    if done.returncode != 0:
        return False, f"ERROR (exit {done.returncode}): {done.stderr.strip().splitlines()[-1:]}"
    r = json.loads(done.stdout.strip().splitlines()[-1])
    bad_o = [i for i, e in enumerate(r["o_error"]) if e > 1e-2]
    bad_dq = [i for i, e in enumerate(r["dq"]) if e > 1e-2]
    worst = max(range(queries), key=lambda i: r["dq"][i])
    said = f"max |o - v| {max(r['o_error']):.2e}, max |dq| {r['dq'][worst]:.3g} at query {worst}"
    if bad_o or bad_dq:
        return False, f"WRONG: {said}; queries with o != v {bad_o}, with dq != 0 {bad_dq}"
    return True, f"ok: {said}"


if __name__ == "__main__" and sys.argv[1:2] == ["--child"]:
    print(json.dumps(call(int(sys.argv[2]), int(sys.argv[3]))))
    sys.exit(0)
if not CPU and not (torch.cuda.is_available() and torch.backends.cudnn.is_available()):
    print("NOT RUN: needs a CUDA device with cuDNN (or --cpu for the script's own check)")
    sys.exit(2)
print(f"torch {torch.__version__}, {'CPU stand-in (math backend, fp32)' if CPU else torch.cuda.get_device_name()}, "
      f"head dim {HEAD_DIM}")
failed = []
for queries in (HEAD_DIM, HEAD_DIM + 1):
    for keys in (1, 2):
        ok, said = run(queries, keys)
        print(f"{queries} queries, the key {'once' if keys == 1 else 'twice'}: {said}")
        failed += [] if ok else [f"{queries}/{keys}"]
print("FAIL" if failed else "PASS")
sys.exit(1 if failed else 0)
