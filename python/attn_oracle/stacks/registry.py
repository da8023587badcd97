"""The stack modules, the venv each runs in, and how scripts/stacks checks them.

Kept apart from the modules so that listing them imports no stack.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Stack:
    name: str  # the module under attn_oracle.stacks
    title: str  # the stack, as its users call it
    env: str  # the venv scripts/stacks creates: requirements-ENV.txt beside this file
    backends: tuple[str, ...]  # the classes `check` runs, one per capability or path
    check_args: tuple[str, ...] = ()  # extra `check` options (--shape-stable for stacks that compile per shape)
    needs: tuple[str, ...] = field(default_factory=tuple)  # environment variables the module needs (a checkout path)
    # Runs only where a CUDA device is: `scripts/stacks --device run` checks these, scripts/stacks skips them.
    gpu: bool = False
    environ: tuple[str, ...] = ()  # NAME=VALUE for its checks in the device run (a shorter worker reply limit)


# Stacks that validate no packed metadata: their invalid-input property is skipped (the file says why).
UNVALIDATED = ("--skips", "fixtures/skips/stacks-without-validation.txt")

STACKS: tuple[Stack, ...] = (
    Stack("megatron", "Megatron-core", "torch", ("Backend", "PaddedBackend", "EodMaskBackend"),
          check_args=UNVALIDATED),
    # megatron.training.utils' EOD mask: a known bug of 0.19, run against its expected failures.
    Stack("megatron", "Megatron-core (training utils)", "torch", ("TrainingEodMaskBackend",),
          check_args=("--filter", "attention/", "--xfails", "fixtures/xfails/megatron-training-0.19.txt")),
    Stack("fast_llm", "Fast-LLM", "torch", ("Backend",), needs=("ATTN_ORACLE_FAST_LLM",)),
    Stack("jax_nn", "jax.nn", "jax", ("Backend", "Lengths"), check_args=("--shape-stable",)),
    Stack("flax_attention", "Flax", "jax", ("Backend",), check_args=("--shape-stable",)),
    Stack("maxtext", "MaxText", "jax", ("Backend",), check_args=("--shape-stable",)),
    # TransformerEngine 2.20's bottom-right metadata bug, run against its expected failures.
    Stack("te_jax", "TransformerEngine JAX", "jax", ("Backend",),
          check_args=("--shape-stable", "--xfails", "fixtures/xfails/te-jax-2.20.txt")),
    # Context parallelism: TE's reorders and the per-rank metadata of its all-gather and ring paths (TE's
    # partitioned impl compiled per shape); MaxText's reorders; judged by the context_parallel/ properties.
    Stack("te_jax_cp", "TransformerEngine JAX context parallelism", "jax", ("StripedRing", "DualChunkSwap"),
          check_args=("--shape-stable",)),
    # Its all-gather path's run offsets (docs/findings/te-jax-2.20-cp-all-gather-run-offsets.md), run against it.
    Stack("te_jax_cp", "TransformerEngine JAX context parallelism (striped all-gather)", "jax", ("Striped",),
          check_args=("--shape-stable", "--xfails", "fixtures/xfails/te-jax-2.20-cp-striped-all-gather.txt")),
    Stack("maxtext_cp", "MaxText context-parallel reorder", "jax",
          ("DualChunkSwap", "MaskDualChunkSwap", "GpuDualChunkSwap", "GpuStriped")),
    Stack("torch_flex", "PyTorch flex attention", "torch", ("Backend",)),
    Stack("hf_transformers", "Hugging Face transformers", "torch",
          ("PositionIdsMetadata", "UnpadMetadata", "CollatorMetadata"), check_args=UNVALIDATED),
    # Its SDPA path: torch's CPU fp16 GQA backward is over budget on one draw, run against that.
    Stack("hf_transformers", "Hugging Face transformers (SDPA)", "torch", ("SdpaAttention",),
          check_args=("--xfails", "fixtures/xfails/hf-transformers-5.24-sdpa-cpu.txt")),
    # Context parallelism (docs/stacks.md, "Context parallelism"): judged by the context_parallel/
    # properties; each method is also tested directly by python/tests/test_stack_*_cp.py.
    Stack("megatron_cp", "Megatron-core context parallelism (THD)", "torch", ("Backend", "PerSequence")),
    # torch checks no explicit indices (a limitation): run against that expected failure.
    Stack("torch_cp", "PyTorch context parallelism (flex attention, gloo ranks)", "torch", ("Backend",),
          check_args=("--xfails", "fixtures/xfails/torch-2.15-cp-explicit-indices.txt")),
    Stack("ring_flash_attn_cp", "ring-flash-attn (llama3 varlen CP)", "torch", ("Llama3",)),
    # The zigzag ring checks no layout (a limitation): run against that expected failure.
    Stack("ring_flash_attn_cp", "ring-flash-attn (zigzag varlen CP)", "torch", ("Zigzag",),
          check_args=("--xfails", "fixtures/xfails/ring-flash-attn-0.1.8-zigzag.txt")),
    # GPU targets (scripts/stacks --device; docs/stacks.md, "On a GPU").
    # ring-flash-attn's CP whole on one GPU: every rank a thread calling torch's FA2 kernels with the
    # package's own per-rank cu_seqlens, its ring / all-gather between threads, its own lse merge.
    Stack("ring_flash_attn_cp", "ring-flash-attn (llama3 varlen CP, FA2 on one GPU)", "torch", ("Llama3",),
          check_args=("--filter", "context_parallel/"), gpu=True),
    Stack("ring_flash_attn_cp", "ring-flash-attn (zigzag varlen CP, FA2 on one GPU)", "torch", ("Zigzag",),
          check_args=("--filter", "context_parallel/", "--xfails", "fixtures/xfails/ring-flash-attn-0.1.8-zigzag.txt"),
          gpu=True),
    Stack("torch_varlen", "PyTorch varlen attention (FlashAttention-2)", "torch", ("Backend",), gpu=True),
    Stack("xformers_attention", "xformers memory_efficient_attention", "torch", ("Flash",), gpu=True),
    # cutlassF-pt in fp32 with GQA and a causal bias: wrong o on a few draws, not yet isolated, run against it.
    Stack("xformers_attention", "xformers memory_efficient_attention (CUTLASS, dispatch)", "torch",
          ("Cutlass", "Dispatch"), check_args=("--xfails", "fixtures/xfails/xformers-0.0.35-cutlass-fp32-gqa-causal.txt"),
          gpu=True),
    Stack("torch_sdpa", "PyTorch SDPA, one backend forced", "torch", ("EfficientPadded", "CudnnPadded", "EfficientJagged"),
          gpu=True),
    # Nested flash applies is_causal bottom-right on unequal sides in 2.11 (docs/findings), run against it.
    Stack("torch_sdpa", "PyTorch SDPA, flash on nested tensors", "torch", ("FlashJagged",),
          check_args=("--xfails", "fixtures/xfails/torch-2.11-sdpa-flash-jagged.txt"), gpu=True),
    # cuDNN on nested tensors took 10-14 s for its first draw and then no draw in 190-270 s on an H100
    # (bench/results/2026-11-26-nvidia-h100-stacks-torch.md): one property, 20 draws, inside the deadline.
    # A call that hangs fails after 60 s instead of the run's 300 (which one call spent on the H100).
    Stack("torch_sdpa", "PyTorch SDPA, cuDNN on nested tensors", "torch", ("CudnnJagged",),
          check_args=("--filter", "attention/matchesReference", "--cases", "20"), gpu=True,
          environ=("ATTN_ORACLE_WORKER_TIMEOUT=60",)),
    Stack("torch_flex", "PyTorch flex attention (CUDA, eager)", "torch", ("Backend",), gpu=True),
    # Compiled flex compiles a kernel per shape and direction (3.6-8.4 s each on an H200): shape-stable
    # draws, one property, 20 draws, so that it ends inside the device run's deadline.
    Stack("torch_flex", "PyTorch flex attention (CUDA, compiled)", "torch", ("Compiled",),
          check_args=("--shape-stable", "--filter", "attention/matchesReference", "--cases", "20"), gpu=True),
    Stack("hf_transformers", "Hugging Face transformers (SDPA, CUDA)", "torch", ("SdpaAttention",), gpu=True),
    # JAX on a GPU: the XLA paths in fp16 too (the modules pick the GPU backend), and cuDNN's fused attention.
    Stack("jax_nn", "jax.nn (CUDA)", "jax", ("Backend", "Lengths"), check_args=("--shape-stable",), gpu=True),
    Stack("flax_attention", "Flax (CUDA)", "jax", ("Backend",), check_args=("--shape-stable",), gpu=True),
    Stack("maxtext", "MaxText (CUDA)", "jax", ("Backend",), check_args=("--shape-stable",), gpu=True),
    Stack("jax_cudnn", "JAX cuDNN fused attention", "jax", ("Lengths", "Packed"), check_args=("--shape-stable",),
          gpu=True),
)


def by_env(env: str) -> list[Stack]:
    return [s for s in STACKS if s.env == env]
