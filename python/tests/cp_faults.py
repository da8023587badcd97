"""Faults planted in the torch gloo runner's ranks through its step hook (each rank calls
hook(rank, step) as a step begins); the ranks import this module by name, so the hooks are
module-level functions bound with functools.partial."""

import os
import time


def hang(rank, step, *, at_rank, at_step):
    if (rank, step) == (at_rank, at_step):
        time.sleep(10**6)


def fail(rank, step, *, at_rank, at_step):
    if (rank, step) == (at_rank, at_step):
        raise RuntimeError(f"planted failure on rank {rank}, step {step}")


def die(rank, step, *, at_rank, at_step):
    if (rank, step) == (at_rank, at_step):
        os._exit(7)
