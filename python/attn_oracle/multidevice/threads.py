"""Ranks as threads of one process, for stack code whose transport can be swapped: the ring's
point-to-point exchange and the all-gather / reduce-scatter between ``cp`` ranks, each rank a
thread, every tensor on the one device the process has (one GPU, or the CPU).

This is what lets a stack's own per-rank code run whole on one device: each rank calls the
stack's function with its local shard, its kernels run for real, and the stack's own merge
code combines what arrives, while the messages that would cross devices pass through a
:class:`Hub`. A rank that raises stops the others at their next wait; a rank that waits past
``timeout`` seconds for a message is reported as hung, with the message it waited for.

Nothing of a framework is imported here: a message is copied when posted (``clone()`` for a
torch tensor, a deep copy otherwise); the reductions use ``+``.
"""

from __future__ import annotations

import copy
import threading
import time
from typing import Any, Callable, Sequence

__all__ = ["Hub", "RankHung", "run_ranks"]


class RankHung(RuntimeError):
    """A rank waited past the hub's timeout for a message no rank sent."""


class _Failed(RuntimeError):
    """Another rank raised: this one stops waiting."""


class Hub:
    """The messages between the ``world`` ranks of one run, keyed by what every rank computes
    alike (a channel name, the call's number on that channel, the receiving rank)."""

    def __init__(self, world: int, timeout: float = 120.0):
        self.world, self.timeout = int(world), float(timeout)
        self._box: dict = {}
        self._cv = threading.Condition()
        self.error: BaseException | None = None

    def post(self, key, value) -> None:
        with self._cv:
            self._box[key] = value.clone() if hasattr(value, "clone") else copy.deepcopy(value)
            self._cv.notify_all()

    def read(self, key, rank: int):
        """The value posted under ``key`` (left in place: collectives read it from every rank)."""
        with self._cv:
            if not self._cv.wait_for(lambda: key in self._box or self.error is not None, self.timeout):
                raise RankHung(f"rank {rank} waited {self.timeout:.0f} s for message {key!r}, which no rank sent: "
                               "a rank hung or took another path")
            if self.error is not None and key not in self._box:
                raise _Failed(f"rank {rank} stopped: another rank raised {type(self.error).__name__}")
            return self._box[key]

    def fail(self, error: BaseException) -> None:
        with self._cv:
            if self.error is None:
                self.error = error
            self._cv.notify_all()

    # Collectives, each numbered by the caller's count of that collective on its rank.
    def all_gather(self, rank: int, channel: str, value) -> list:
        """Every rank's ``value`` of this call, in rank order."""
        self.post((channel, rank), value)
        return [self.read((channel, r), rank) for r in range(self.world)]

    def reduce_scatter(self, rank: int, channel: str, value, chunks: Callable[[Any, int], Sequence]) -> Any:
        """The sum over ranks of chunk ``rank`` of each rank's ``value`` (``chunks(value, world)``)."""
        parts = [chunks(v, self.world)[rank] for v in self.all_gather(rank, channel, value)]
        total = parts[0]
        for part in parts[1:]:
            total = total + part  # a new value: the posted ones stay as every rank reads them
        return total


def run_ranks(world: int, work: Callable[[int, Hub], Any], timeout: float = 120.0) -> list:
    """``work(rank, hub)`` on ``world`` threads; the results in rank order. The first error
    raised by a rank is raised here (a hung rank as :class:`RankHung`), after every thread ended."""
    hub = Hub(world, timeout)
    results: list = [None] * world

    def body(rank: int) -> None:
        try:
            results[rank] = work(rank, hub)
        except BaseException as e:  # noqa: BLE001 - handed to the caller below
            hub.fail(e)

    threads = [threading.Thread(target=body, args=(r,), name=f"rank-{r}", daemon=True) for r in range(world)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout + 30.0  # one deadline for all: a join each would add up
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    alive = [t.name for t in threads if t.is_alive()]
    if alive:
        raise RankHung(f"{', '.join(alive)} still running {timeout + 30.0:.0f} s after the run's deadline")
    if hub.error is not None:
        raise hub.error
    return results
