"""attn_oracle.multidevice.threads: ranks as threads, their messages and collectives, a rank that
raises and a rank that hangs (the transport ring_flash_attn_cp runs the package's ranks over)."""
import time

import numpy as np
import pytest

from attn_oracle.multidevice import threads


def test_a_ring_pass_and_the_collectives_deliver_each_ranks_values():
    def work(rank, hub):
        hub.post(("ring", (rank + 1) % hub.world), np.array([rank]))
        got = hub.read(("ring", rank), rank)
        gathered = hub.all_gather(rank, "gather", np.array([rank * 10]))
        reduced = hub.reduce_scatter(rank, "reduce", np.arange(hub.world) + rank, lambda v, w: np.split(v, w))
        return int(got[0]), [int(g[0]) for g in gathered], int(reduced[0])

    results = threads.run_ranks(4, work)
    assert [r[0] for r in results] == [3, 0, 1, 2]  # each rank got its predecessor's value
    assert all(r[1] == [0, 10, 20, 30] for r in results)
    assert [r[2] for r in results] == [4 * r + 6 for r in range(4)]  # sum over ranks of element r


def test_a_posted_message_is_a_copy_the_sender_may_overwrite():
    def work(rank, hub):
        value = np.array([rank])
        hub.post(("m", 1 - rank), value)
        value[0] = -1
        return int(hub.read(("m", rank), rank)[0])

    assert threads.run_ranks(2, work) == [1, 0]


def test_a_rank_that_raises_stops_the_others_and_its_error_is_raised():
    def work(rank, hub):
        if rank == 2:
            raise ValueError("rank 2's kernel failed")
        return hub.read(("never", rank), rank)

    start = time.monotonic()
    with pytest.raises(ValueError, match="rank 2's kernel failed"):
        threads.run_ranks(3, work, timeout=60)
    assert time.monotonic() - start < 10  # the waiting ranks stopped at once, not at the timeout


def test_a_rank_that_waits_for_a_message_no_rank_sends_is_reported_hung():
    def work(rank, hub):
        if rank == 0:
            return hub.read(("from rank 1", 0), rank)
        return None  # rank 1 takes another path and never sends

    with pytest.raises(threads.RankHung, match=r"rank 0 waited 1 s for message \('from rank 1', 0\)"):
        threads.run_ranks(2, work, timeout=1)
