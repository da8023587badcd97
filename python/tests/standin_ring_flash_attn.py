"""attn_oracle.stacks.ring_flash_attn_cp on the CPU with its attention served: the module as it
is, its kernels torch's FlashAttention-2 ops, whose CPU kernel is python/tests/flash_varlen_standin.py
(registered before the module is imported, so that it finds a kernel). On a GPU the module itself
is the target."""
import flash_varlen_standin  # noqa: F401 - registers the CPU kernel the module's kernels call

from attn_oracle.stacks import ring_flash_attn_cp  # noqa: E402
from attn_oracle.stacks.ring_flash_attn_cp import Llama3, Zigzag  # noqa: E402

__all__ = ["Llama3", "Zigzag", "ZigzagRingTurnedBackwards"]


class _RingTurnedBackwards(ring_flash_attn_cp._ThreadRingComm):
    def __init__(self, group):
        super().__init__(group)
        self.send_rank, self.recv_rank = self.recv_rank, self.send_rank


class ZigzagRingTurnedBackwards(Zigzag):
    """Planted: the ring's blocks travel from rank r + 1 to r (step s meets rank (r + s) mod cp's keys,
    the ring-direction slip of a hand-written P2P ring): each rank's later steps get keys its causal
    mask then reads as the wrong half."""

    name = "planted-ring-flash-attn-zigzag-backwards"
    ring_comm = _RingTurnedBackwards
