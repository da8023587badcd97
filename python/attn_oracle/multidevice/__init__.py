"""Context parallelism run for real on several devices, as Python backends of the
``context_parallel`` capability (docs/python.md; the methods are listed in
``attn_oracle.worker``):

- :mod:`attn_oracle.multidevice.jax_shard_map`: the ranks are JAX devices (host devices on
  a CPU), K/V moved by ``jax.lax`` collectives inside ``shard_map``, gradients by ``jax.vjp``
  of the whole sharded forward;
- :mod:`attn_oracle.multidevice.torch_gloo`: the ranks are local processes in a
  ``torch.distributed`` gloo group, K/V moved by all_gather, isend/irecv and all_to_all,
  gradients by autograd on each rank and the collectives' transposes written out.

``python -m attn_oracle check attn_oracle.multidevice.jax_shard_map:Backend``. Nothing
is imported here: importing a runner imports its framework (and the JAX one sets
``XLA_FLAGS`` first).
"""
