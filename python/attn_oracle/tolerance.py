"""The tolerance judge: is a backend's output within the rule for this case?

The rule (docs/semantics.md#6-tolerance; the C++ of reference/src/tolerance.cpp):
a float tensor passes when

    max |backend - ref64| <= k * max |naive - ref64| + eps

where ``ref64`` is the float64 reference on the dtype-rounded inputs, ``naive``
a same-precision naive run of the same problem, k = 2 for outputs (``o``,
``lse`` or small-seq ``p``) and 3 for gradients (``dq``, ``dk``, ``dv``), and
eps the dtype's floor (lse always fp32's). Infinities must match exactly, NaN
always fails, and a 16-bit ``o`` whose errors all lean one way (truncation
instead of round-to-nearest-even) fails too.

:func:`judge` runs the rule for every tensor of an ``attention`` or
``small_seq`` case and returns a :class:`Verdict`: per tensor the budget, the
worst element and the first element (row-major) that breaks the rule.
Tested by python/tests/test_tolerance.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional, Union

import numpy as np

from . import _core
from .cases import Case, PathLike, read_case

OUTPUT_FACTOR = _core.OUTPUT_TOLERANCE_FACTOR
GRADIENT_FACTOR = _core.GRADIENT_TOLERANCE_FACTOR


def tolerance_floor(dtype: str) -> float:
    """eps of the rule for tensors stored in ``dtype`` (``fp32``, ``fp16``, ``bf16``)."""
    return _core.tolerance_floor(dtype)


@dataclass(frozen=True)
class TensorCheck:
    """The rule on one tensor.

    ``error`` is max |backend - ref64| (infinite for a structural failure: a
    NaN, infinities that differ, a missing tensor or a wrong shape, said in
    ``detail``); ``budget`` = k x ``naive_error`` + ``eps``. ``worst_index`` and
    ``first_failure`` are indices into the tensor (None when there is none):
    the element with the largest error, and the first element in row-major
    order that breaks the rule, each with the backend's and the reference's value.
    """

    tensor: str
    passed: bool
    error: float
    budget: float
    ratio: float
    naive_error: float
    k: float
    eps: float
    detail: str
    description: str
    worst_index: Optional[tuple[int, ...]]
    worst_backend: float
    worst_reference: float
    first_failure: Optional[tuple[int, ...]]
    first_failure_backend: float
    first_failure_reference: float

    def __str__(self) -> str:
        line = self.description
        if self.first_failure is not None:
            line += (f"; first failing element {list(self.first_failure)}: backend {self.first_failure_backend:g}"
                     f" vs reference {self.first_failure_reference:g}")
        return line


@dataclass(frozen=True)
class Verdict:
    """Every tensor's check; true when all passed."""

    checks: tuple[TensorCheck, ...]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def __bool__(self) -> bool:
        return self.passed

    @property
    def failures(self) -> tuple[TensorCheck, ...]:
        return tuple(c for c in self.checks if not c.passed)

    @property
    def first_failure(self) -> Optional[TensorCheck]:
        """The first tensor (o, lse / p, dq, dk, dv) that failed, or None."""
        return next(iter(self.failures), None)

    def __getitem__(self, tensor: str) -> TensorCheck:
        for c in self.checks:
            if c.tensor == tensor:
                return c
        raise KeyError(tensor)

    def __str__(self) -> str:
        return "\n".join(["PASS" if self.passed else "FAIL"] + [f"  {c}" for c in self.checks])


def _index(flat: int, shape: tuple[int, ...]) -> Optional[tuple[int, ...]]:
    if flat < 0:
        return None
    if not shape or int(np.prod(shape)) <= flat:
        return (flat,)
    return tuple(int(i) for i in np.unravel_index(flat, shape))


def _tensor_check(raw: dict[str, Any], shape: tuple[int, ...]) -> TensorCheck:
    return TensorCheck(
        tensor=raw["tensor"], passed=raw["passed"], error=raw["error"], budget=raw["budget"], ratio=raw["ratio"],
        naive_error=raw["naive_error"], k=raw["k"], eps=raw["eps"], detail=raw["detail"],
        description=raw["description"],
        worst_index=_index(raw["worst_index"], shape), worst_backend=raw["backend_value"],
        worst_reference=raw["reference_value"],
        first_failure=_index(raw["first_failure_index"], shape),
        first_failure_backend=raw["first_failure_backend"],
        first_failure_reference=raw["first_failure_reference"],
    )


def _output_mapping(output) -> Mapping[str, Any]:
    if isinstance(output, Mapping):
        return output
    if hasattr(output, "as_dict"):
        return output.as_dict()
    raise TypeError(f"output: expected a mapping of tensors or an AttentionResult, found {type(output).__name__}")


def judge(case: Union[Case, PathLike], output) -> Verdict:
    """Judges a backend's ``output`` for an ``attention`` or ``small_seq`` case.

    ``output`` maps tensor names to arrays in the layouts ``attn-oracle eval``
    prints: ``o`` ``[..., B, Tq, Hq, D]``, ``lse`` ``[..., B, Hq, Tq]`` (or
    ``p`` ``[docs, Hq, 16]`` for small_seq), and with backward ``dq``, ``dk``,
    ``dv``; an :class:`attn_oracle.AttentionResult` works too. The reference and
    the naive run are computed from the case (its dtype-rounded inputs). A case
    the oracle rejects raises AttnOracleError with its code.
    """
    if not isinstance(case, Case):
        case = read_case(case)
    tensors = _output_mapping(output)
    second = "p" if case.op == "small_seq" else "lse"

    def array(name):
        value = tensors.get(name)
        return None if value is None else np.ascontiguousarray(value, dtype=np.float64)

    arrays = {name: array(name) for name in ("o", second, "dq", "dk", "dv")}
    raw = _core.judge(case.to_json_text(), *arrays.values())
    shapes = {name: (a.shape if a is not None else ()) for name, a in arrays.items()}
    return Verdict(tuple(_tensor_check(r, shapes[r["tensor"]]) for r in raw))
