"""The inputs a backend takes: :class:`Domain`, the one home of the mask kind and dtype names.

A backend declares it as its ``domain`` attribute; the worker sends it in its hello
(docs/protocol.md, "domain") and the suite draws inside it, so that a run of N draws judges
about N instead of declining most of them. Import it as ``from attn_oracle import Domain``.
No NumPy and no extension here: a worker that only declares its domain imports nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Optional

__all__ = ["Domain", "declared_domain", "MASK_KINDS", "DTYPES", "CP_STRATEGIES", "CP_BALANCES", "is_causal", "is_bottom_right", "mask_kind",
           "TOP_LEFT_KINDS", "CAUSAL_KINDS", "FRAMEWORK_DTYPE_NAMES", "framework_dtypes"]

# The mask kinds (docs/semantics.md#2-the-attention-mask) and dtypes, by the names the protocol and
# case files use.
MASK_KINDS = ("no_mask", "padding", "causal", "padding_causal", "causal_bottom_right", "padding_causal_bottom_right")
DTYPES = ("fp32", "fp16", "bf16")
# Context parallelism's strategies and load balancing (docs/semantics.md#91-context-parallelism).
CP_STRATEGIES = ("all_gather", "ring", "all_to_all")
CP_BALANCES = ("contiguous", "dual_chunk_swap", "striped", "head_tail", "explicit_indices")


# What a kind's name says; the stack modules and adapters read kinds through these, never by spelling.
def is_causal(kind: str) -> bool:
    """Whether the kind has a causal term (top-left or bottom-right)."""
    return "causal" in kind


def is_bottom_right(kind: str) -> bool:
    """Whether the kind anchors its causal term (and a window's left side) at each document's last key."""
    return kind.endswith("bottom_right")


def mask_kind(*, padding: bool, causal: bool, bottom_right: bool = False) -> str:
    """The kind with these terms: ``mask_kind(padding=True, causal=True)`` is ``padding_causal``."""
    if bottom_right and not causal:
        raise ValueError("a bottom-right kind has a causal term")
    kind = "_".join(["padding"] * padding + ["causal"] * causal + ["bottom_right"] * bottom_right)
    return kind or "no_mask"


TOP_LEFT_KINDS = tuple(k for k in MASK_KINDS if not is_bottom_right(k))  # no bottom-right term
CAUSAL_KINDS = tuple(k for k in MASK_KINDS if is_causal(k))

# The dtypes by their names in NumPy (ml_dtypes for bfloat16), torch and jax.numpy.
FRAMEWORK_DTYPE_NAMES = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def framework_dtypes(framework, names=DTYPES) -> dict:
    """``{name: framework.<dtype>}`` for the given dtype names: ``framework_dtypes(torch)["bf16"]`` is
    ``torch.bfloat16``; ``framework_dtypes(jnp, ("fp16", "bf16"))`` the half types of JAX."""
    return {name: getattr(framework, FRAMEWORK_DTYPE_NAMES[name]) for name in names}


@dataclass(frozen=True)
class Domain:
    """The inputs a backend takes (docs/protocol.md, "domain"); the defaults take every input.

    self_attention_only: q and kv are one batch (the same ids, positions, T and extra dims).
    no_padding: no padding token (id 0) on either side.
    positions_from_zero: every document's positions are 0, 1, 2, ...
    one_sequence_a_row: each row of each side is one sequence: at most one
    document, from token 0, then only padding (what one length a row says:
    jax.nn's query_seq_lengths, Megatron-core's padded samples).
    max_position: the largest position taken (2**31 - 1 for a stack that holds
    positions in int32); 0 for no limit. The extreme-position properties move
    positions to the top of it.
    max_rows: the most rows B (1: one row); 0 for no limit.
    extra_dims: whether extra (vmapped) leading dims before [B, T] are taken.
    positions_extra_dims: whether positions may carry those extra dims; False:
    under extra dims positions are [B, T], shared by every slice (TransformerEngine
    JAX vmaps the segment ids only).
    mask_kinds: the mask kinds taken (names as in docs/semantics.md); empty for all six.
    windows: whether a sliding window other than (-1, -1) is taken.
    causal_windows_only: a window only where it ends at the query: right side 0,
    or any under a causal kind (cuDNN's sliding_window_length is (i - W, i]).
    dtypes: among "fp32", "fp16", "bf16"; empty for all. head_dims: empty for any.
    sizes: the sizes a compiled backend was built for (jax.jit and torch.compile
    compile once per shape), a dict of lists, each optional: ``tokens`` (T of a
    side), ``rows`` (B), ``max_segments`` (M), ``heads`` ([heads_q, heads_kv]
    pairs); the draws are grown onto it and an input off it is outside the domain.
    cp_strategies, cp_balances: the context-parallel strategies and load
    balancing taken (names as in CP_STRATEGIES and CP_BALANCES); cp_sizes: the
    rank counts, cp_stripes: the stripe sizes (striped), integers >= 1; empty for all.
    """

    self_attention_only: bool = False
    no_padding: bool = False
    positions_from_zero: bool = False
    one_sequence_a_row: bool = False
    max_position: int = 0
    max_rows: int = 0
    extra_dims: bool = True
    positions_extra_dims: bool = True
    mask_kinds: tuple = ()
    windows: bool = True
    causal_windows_only: bool = False
    dtypes: tuple = ()
    head_dims: tuple = ()
    sizes: Optional[dict] = None
    cp_strategies: tuple = ()
    cp_balances: tuple = ()
    cp_sizes: tuple = ()
    cp_stripes: tuple = ()

    def __post_init__(self):
        for key in ("self_attention_only", "no_padding", "positions_from_zero", "one_sequence_a_row", "extra_dims",
                    "positions_extra_dims", "windows", "causal_windows_only"):
            if not isinstance(getattr(self, key), bool):
                raise TypeError(f"Domain.{key} is {getattr(self, key)!r}: True or False")
        for key in ("max_rows", "max_position"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise TypeError(f"Domain.{key} is {value!r}: an integer >= 0 (0: no limit)")
        for key, known in (("mask_kinds", MASK_KINDS), ("dtypes", DTYPES), ("cp_strategies", CP_STRATEGIES),
                           ("cp_balances", CP_BALANCES)):
            names = getattr(self, key)
            if isinstance(names, str) or any(n not in known for n in names):
                raise ValueError(f"Domain.{key} is {names!r}: a list among {', '.join(known)}")
            object.__setattr__(self, key, tuple(names))
        for key in ("head_dims", "cp_sizes", "cp_stripes"):
            values = getattr(self, key)
            if isinstance(values, str) or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in values):
                raise TypeError(f"Domain.{key} is {values!r}: a list of integers >= 1")
            object.__setattr__(self, key, tuple(values))
        if self.sizes is not None:
            object.__setattr__(self, "sizes", _size_menu(self.sizes))

    def to_hello(self) -> dict:
        """The hello's "domain": the fields that differ from taking every input."""
        default = Domain()
        return {f.name: list(v) if isinstance(v, tuple) else v
                for f in fields(self) if (v := getattr(self, f.name)) != getattr(default, f.name)}


SIZE_MENU_KEYS = ("tokens", "rows", "max_segments", "heads")


def _size_menu(sizes) -> dict:
    """Domain.sizes checked here, so that a mistake is the backend's error, not a protocol error."""
    if not isinstance(sizes, dict) or set(sizes) - set(SIZE_MENU_KEYS):
        raise ValueError(f"Domain.sizes is {sizes!r}: a dict with some of {', '.join(SIZE_MENU_KEYS)}")
    def whole(v, least):
        return not isinstance(v, bool) and isinstance(v, int) and v >= least
    out = {}
    for key, values in sizes.items():
        values = list(values)
        if key == "heads":
            if not all(len(pair) == 2 and whole(pair[0], 1) and whole(pair[1], 1) and pair[0] % pair[1] == 0
                       for pair in values):
                raise ValueError(f"Domain.sizes['heads'] is {values!r}: [heads_q, heads_kv] pairs, heads_q a multiple of heads_kv")
            values = [list(pair) for pair in values]
        elif not all(whole(v, 0 if key == "tokens" else 1) for v in values):
            raise ValueError(f"Domain.sizes[{key!r}] is {values!r}: a list of integers >= {0 if key == 'tokens' else 1}")
        out[key] = values
    return out


def declared_domain(backend) -> Optional[Domain]:
    """The backend's ``domain`` attribute as a Domain (a dict is read by its keys), or None."""
    declared = getattr(backend, "domain", None)
    if declared is None or isinstance(declared, Domain):
        return declared
    if isinstance(declared, dict):
        unknown = sorted(set(declared) - {f.name for f in fields(Domain)})
        if unknown:
            raise ValueError(f"the backend's domain has the unknown key {unknown[0]!r} "
                             f"(known: {', '.join(f.name for f in fields(Domain))})")
        return Domain(**declared)
    raise TypeError(f"the backend's domain {declared!r} must be an attn_oracle.Domain or a dict of its fields")
