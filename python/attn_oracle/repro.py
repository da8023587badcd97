"""Standalone reproductions: a counterexample as one Python file a stack's maintainers run without attn-oracle.

    python -m attn_oracle repro MODULE:CLASS CASE [-o FILE]

The bundled CLI finds the call of the case's property check that the backend
answers differently from the float64 reference (``attn-oracle repro
--direct``; a metamorphic property's transformed call when that is the wrong
one). This module writes that call as a script that imports only NumPy and
the code under test, builds the inputs inline, calls the same code the
backend called, compares with the reference's answer written out (integers
exactly, floats within the tolerance rule's budget, explained in one comment),
prints expected against got for every field and ends in an AssertionError
while they differ (exit 0 once fixed).

What the script imports and calls:

- a backend class with a ``reproduction()`` method (the stack modules):
  :class:`StackCall`, the stack's own public API. The functions it names are
  pasted by their source, so the script runs the very code the backend runs;
- any other backend: its own module (``from mypkg.kernels import Backend``),
  called with plain namespaces that carry what the worker's Batch, Problem and
  KvBufferProblem carry.

Tested by python/tests/test_repro.py (planted twins: the script fails, and
passes against the correct backend) and the stacks' tests.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from . import bundled
from .cases import Case, read_case
from .tolerance import judge
from .worker import produced_outputs

__all__ = ["StackCall", "direct_case", "python_script", "write"]


@dataclass
class StackCall:
    """How a stack module calls its stack, for a reproduction (a backend's ``reproduction(case)``).

    ``imports``: the script's import lines (the stack's public modules).
    ``functions``: the module's functions the backend calls, pasted by their
    source (decorators dropped); they may use only the imports, NumPy (``np``)
    and each other. ``call``: the expression whose value (a dict, or an object
    with attributes) is compared, over the inline inputs: ``q_ids``, ``q_pos``,
    ``kv_ids``, ``kv_pos``, ``mask``, ``window``, ``max_segments``; for
    attention also ``q``, ``k``, ``v``, ``do`` [R, T, H, D] float64, ``scale``,
    ``dtype``, ``backward``; for the K/V buffer ``doc_lengths``,
    ``micro_seq_tokens`` and ``i``. ``fields``: the suite's fields the call
    returns, each with the call's name for it (empty: every field, by the
    suite's names). ``expected``: more exact
    expectations in the stack's own terms. ``notes``: how to run it.
    """

    imports: Sequence[str]
    functions: Sequence[Callable]
    call: str
    fields: dict = field(default_factory=dict)
    expected: dict = field(default_factory=dict)
    notes: Sequence[str] = ()


# ---------------------------------------------------------------------------
# The disagreeing call
# ---------------------------------------------------------------------------


class Declined(Exception):
    """The backend does not take the case (its domain or its ``unsupported`` hook): SKIP, exit 4, as replay says."""


def direct_case(target: str, case_path: str) -> tuple[Case, str, str]:
    """(the call the backend answers wrongly, with ``expected``; what the CLI said; its first differing line)."""
    with tempfile.TemporaryDirectory(prefix="attn-oracle-repro-") as tmp:
        out = os.path.join(tmp, "direct.case.json")
        done = bundled.run(["repro", target, case_path, "--direct", out], capture_output=True, text=True)
        if done.returncode == 4:  # the backend does not take the case: nothing to reproduce
            raise Declined(done.stdout.strip())
        if done.returncode != 0:
            raise RuntimeError((done.stderr or done.stdout).strip() or f"attn-oracle repro exited {done.returncode}")
        said = done.stderr.strip().splitlines()
        return read_case(out), "\n".join(said), (said[-1].strip() if said else "")


# ---------------------------------------------------------------------------
# Writing the script
# ---------------------------------------------------------------------------


def _literal(a) -> str:
    a = np.asarray(a)
    if a.dtype.kind == "f":
        text = json.dumps(np.where(np.isinf(a), 0.0, a).tolist()) if np.isinf(a).any() else json.dumps(a.tolist())
        if np.isinf(a).any():  # -inf (an lse that attends nothing) spelled out
            return f"np.where(np.array({json.dumps(np.isneginf(a).tolist())}), -np.inf, np.array({text}))"
        return f"np.array({text})"
    if a.dtype.kind == "b":
        return f"np.array({a.tolist()!r})"
    return f"np.array({json.dumps(np.asarray(a, np.int64).tolist())})"


def _source(fn: Callable) -> str:
    lines = textwrap.dedent(inspect.getsource(fn)).splitlines()
    while lines and lines[0].startswith("@"):
        lines.pop(0)
    return "\n".join(lines)


HELPERS = '''
def field(result, name):
    return result[name] if isinstance(result, dict) else getattr(result, name)


def compare(got, expected, budgets=None):
    """Prints expected against got for every field; returns the fields that differ."""
    differs = []
    for name, want in expected.items():
        have = np.asarray(field(got, name))
        want = np.asarray(want)
        if budgets and name in budgets:
            same = have.shape == want.shape and np.array_equal(np.isinf(have), np.isinf(want)) and \\
                np.array_equal(have[np.isinf(have)], want[np.isinf(want)])
            error = np.max(np.abs(np.where(np.isinf(want), 0, have - want)), initial=0.0) if same else np.inf
            ok = bool(same and error <= budgets[name])
            print(f"{name}: {'ok' if ok else 'DIFFERS'} (max |got - expected| {error:.3g}, budget {budgets[name]:.3g})")
        else:
            ok = have.shape == want.shape and np.array_equal(have, want)
            print(f"{name}: {'ok' if ok else 'DIFFERS'}")
        if not ok:
            print(f"  expected {want.tolist()}\\n  got      {have.tolist()}")
            differs.append(name)
    return differs
'''


def _batch_lines(f: dict) -> list[str]:
    return [f"q_ids = {_literal(f['q']['segment_ids'])}", f"q_pos = {_literal(f['q']['segment_pos'])}",
            f"kv_ids = {_literal(f['kv']['segment_ids'])}", f"kv_pos = {_literal(f['kv']['segment_pos'])}",
            f"mask = {f['mask']!r}", f"window = {tuple(int(w) for w in f.get('window', (-1, -1)))!r}",
            f"max_segments = {int(f['max_segments'])}"]


def _shape_lines(c: Case) -> list[str]:
    f = c.fields
    scale = f.get("scale")
    effective = float(scale) if scale is not None else float(1.0 / np.sqrt(f["head_dim"]))
    lines = [f"heads_q, heads_kv, head_dim = {f['heads_q']}, {f['heads_kv']}, {f['head_dim']}",
             f"scale = {effective!r}", f"dtype = {f['dtype']!r}  # the values below are exact in it",
             f"backward = {bool(f.get('backward', False))}"]
    x = c.inputs()
    rows = {n: np.asarray(a).reshape(-1, *np.shape(a)[-3:]) for n, a in x.items()}  # extra dims as rows
    lines += [f"{n} = {_literal(rows[n])}  # [R, T, H, D]" for n in ("q", "k", "v")]
    lines.append(f"do = {_literal(rows['do'])}" if "do" in rows else "do = None")
    return lines


def _expected(c: Case, produced) -> tuple[dict, dict]:
    """(the reference's answer, field -> budget for floats)."""
    if c.op == "kv_buffer":
        return {}, {}
    want = dict(c.expected or c.eval())
    if "error" in want or c.op == "metadata":
        return want, {}
    keep = ["o"]
    if c.op == "attention" and "lse" in produced:
        keep.append("lse")
    if c.op == "small_seq" and "small_seq_p" in produced:
        keep.append("p")
    if c.fields.get("backward") and "gradients" in produced:
        keep += ["dq", "dk", "dv"]
    verdict = judge(c, want)
    budgets = {t.tensor: float(t.budget) for t in verdict.checks if t.tensor in keep}
    return {k: want[k] for k in keep}, budgets


def _call_lines(c: Case, backend_cls, module: str, name: str) -> tuple[list[str], list[str], str]:
    """(imports, setup lines, the call) for a backend without reproduction(): its own module."""
    imports = [f"from {module} import {name}  # the backend under test"]
    batch = ("SimpleNamespace(q_segment_ids=q_ids, q_segment_pos=q_pos, kv_segment_ids=kv_ids, kv_segment_pos=kv_pos, "
             "mask=mask, window=window, max_segments=max_segments)")
    if c.op == "metadata":
        return imports, [f"batch = {batch}"], f"{name}().metadata(batch)"
    if c.op == "kv_buffer":
        return imports, ["problem = SimpleNamespace(doc_lengths=np.array(doc_lengths), micro_seq_tokens=micro_seq_tokens, "
                         "heads_q=heads_q, heads_kv=heads_kv, head_dim=head_dim, scale=None, dtype=dtype, backward=backward)"], \
            f"{name}().kv_micro_sequence(problem, i)"
    method = "small_seq" if c.op == "small_seq" else "attention"
    return imports, [f"problem = SimpleNamespace(batch={batch}, heads_q=heads_q, heads_kv=heads_kv, head_dim=head_dim, "
                     "scale=scale, effective_scale=scale, dtype=dtype, backward=backward)",
                     "inputs = SimpleNamespace(q=q, k=k, v=v, do=do)"], f"{name}().{method}(problem, inputs)"


def _kv_lines(c: Case) -> list[str]:
    f = c.fields
    return [f"doc_lengths = {[int(x) for x in f['doc_lengths']]}", f"micro_seq_tokens = {int(f['micro_seq_tokens'])}",
            f"heads_q, heads_kv, head_dim = {f['heads_q']}, {f['heads_kv']}, {f['head_dim']}",
            f"dtype, backward = {f['dtype']!r}, {bool(f.get('backward', False))}"]


def _kv_expected(c: Case) -> list[dict]:
    from . import oracle

    micro = oracle.kv_buffer_metadata(c.fields["doc_lengths"], int(c.fields["micro_seq_tokens"]))
    names = ("first_document_begin", "cu_seqlens_q", "cu_seqlens_k", "q_document", "q_position", "kv_document",
             "kv_position")
    return [{n: getattr(m, n) for n in names} for m in micro]


def python_script(c: Case, target: str, *, origin: str = "", differs: str = "", property_id: str = "",
                  transformed: bool = False) -> str:
    """The standalone script for the call ``c`` (a case without a property record, its answer
    in ``expected``) on the backend ``target`` (MODULE:CLASS)."""
    module, name = target.split(":", 1)
    backend_cls = getattr(importlib.import_module(module), name)
    produced = produced_outputs(backend_cls)
    stack: Optional[StackCall] = backend_cls().reproduction(c) if hasattr(backend_cls, "reproduction") else None
    if stack is not None:
        imports, setup, call = list(stack.imports), [_source(f) for f in stack.functions], stack.call
    else:
        imports, setup, call = _call_lines(c, backend_cls, module, name)
    fields = dict(stack.fields) if stack else {}
    head = [f"Reproduction of {property_id or 'a disagreement with the reference'} on {target}",
            f"(written by `python -m attn_oracle repro` from {origin})." if origin else ""]
    head += [f"Input: {line}" for line in _summary(c)]
    if differs:
        head.append(f"Differs: {differs}")
    if transformed:
        head.append("(the call the property made on the counterexample after transforming it)")
    head += list(stack.notes) if stack else [f"Run it where {module} imports; exit 1 (AssertionError) while it differs."]
    out = ['"""' + "\n".join(line for line in head if line) + '\n"""', ""]
    out += ["from types import SimpleNamespace", "", "import numpy as np", ""] if stack is None else ["import numpy as np", ""]
    out += imports + ["", "", HELPERS.strip("\n"), "", ""]
    out += [s + "\n\n" for s in setup if "\n" in s]
    if c.op == "kv_buffer":
        out += _kv_lines(c) + [s for s in setup if "\n" not in s]
        out += ["# The reference's metadata of each micro-sequence (docs/semantics.md#3-metadata), compared exactly.",
                "expected = ["]
        out += [f"    {{{', '.join(f'{fields.get(k, k)!r}: {_literal(v)}' for k, v in m.items())}}}," for m in _kv_expected(c)]
        out += ["]", "differs = []", "for i, want in enumerate(expected):", f"    got = {call}",
                "    print(f'micro-sequence {i}:')", "    differs += [f'micro-sequence {i} {n}' for n in compare(got, want)]"]
    else:
        out += _batch_lines(c.fields) + (_shape_lines(c) if c.op != "metadata" else [])
        out += [s for s in setup if "\n" not in s] + ["", call if "got =" in call else f"got = {call}", ""]
        want, budgets = _expected(c, produced)
        if "error" in want:
            out += [f"# The reference rejects this input with {want['error']['code']}: {want['error'].get('message', '')}",
                    "raise AssertionError('the call above returned instead of rejecting its input')"]
            return "\n".join(out) + "\n"
        if stack is not None and stack.fields:  # the suite's fields the stack's call returns
            want = {k: v for k, v in want.items() if k in stack.fields}
        want = {fields.get(k, k): v for k, v in want.items()}
        budgets = {fields.get(k, k): v for k, v in budgets.items()}
        if budgets:
            out += ["# Floats: max |got - expected| must stay within k * e + eps, where expected is the float64",
                    "# reference, e the error of a naive run in the same precision and eps the dtype's floor",
                    "# (docs/semantics.md#6-tolerance; k = 2 for o and lse, 3 for gradients), computed when this was written.",
                    f"budgets = {json.dumps(budgets)}"]
        else:
            out.append("# The reference's answer (docs/semantics.md#3-metadata), compared exactly.")
        out.append("expected = {")
        out += [f"    {k!r}: {_literal(v)}," for k, v in want.items()]
        out += [f"    {k!r}: {_literal(v)},  # in the stack's terms" for k, v in (stack.expected if stack else {}).items()]
        out += ["}", f"differs = compare(got, expected{', budgets' if budgets else ''})"]
    out += ["assert not differs, f\"{', '.join(differs)} differ from the reference\"", "print('PASS')"]
    return "\n".join(out) + "\n"


def _summary(c: Case) -> list[str]:
    f = c.fields
    if c.op == "kv_buffer":
        return [f"kv_buffer doc_lengths {[int(x) for x in f['doc_lengths']]}, micro_seq_tokens {f['micro_seq_tokens']}"]
    line = f"{c.op} {f['mask']}" + (f" window {tuple(f['window'])}" if tuple(f.get("window", (-1, -1))) != (-1, -1) else "")
    line += f" M={f['max_segments']} | q ids {np.asarray(f['q']['segment_ids']).tolist()} pos " \
            f"{np.asarray(f['q']['segment_pos']).tolist()} | kv ids {np.asarray(f['kv']['segment_ids']).tolist()} pos " \
            f"{np.asarray(f['kv']['segment_pos']).tolist()}"
    if c.op == "metadata":
        return [line]
    return [line, f"{f['dtype']}, heads {f['heads_q']}/{f['heads_kv']}, head_dim {f['head_dim']}"
                  f"{', forward and backward' if f.get('backward') else ', forward'}"]


SCRIPTED_OPS = ("metadata", "attention", "small_seq", "kv_buffer")


def write(target: str, case_path: str, out: Optional[str] = None) -> str:
    """Writes the reproduction of the counterexample at ``case_path`` on ``target``; returns the script."""
    original = read_case(case_path)
    if original.op not in SCRIPTED_OPS:  # the ops a script can state alone; the others replay
        raise RuntimeError(f"a {original.op} case has no standalone script yet (the ops that have one: "
                           f"{', '.join(SCRIPTED_OPS)}); rerun it with `python -m attn_oracle replay {target} "
                           f"{case_path}`")
    c, said, first = direct_case(target, case_path)
    property_id = (original.property or {}).get("id", "")
    transformed = "transformed" in said
    origin = os.path.relpath(case_path)
    origin = origin if not origin.startswith("..") else os.fspath(case_path)
    script = python_script(c, target, origin=origin, differs=first, property_id=property_id,
                           transformed=transformed)
    if target.startswith("attn_oracle.") and "\nfrom attn_oracle" in script:
        print(f"python -m attn_oracle repro: note: {target} has no reproduction(), so the script imports it, "
              "and attn-oracle with it", file=sys.stderr)
    if out:
        with open(out, "w") as f:
            f.write(script)
    return script


def main(argv: Sequence[str]) -> int:
    """``python -m attn_oracle repro MODULE:CLASS CASE [-o FILE]``."""
    args = list(argv)
    out = None
    for flag in ("-o", "--out"):
        if flag in args:
            at = args.index(flag)
            out = args[at + 1] if at + 1 < len(args) else None
            del args[at:at + 2]
    if len(args) != 2 or not bundled.is_target(args[0]):
        print("usage: python -m attn_oracle repro MODULE:CLASS CASE [-o FILE]", file=sys.stderr)
        return 1
    try:
        script = write(args[0], args[1], out)
    except Declined as e:
        print(e)
        return 4
    except RuntimeError as e:
        print(f"python -m attn_oracle repro: {e}", file=sys.stderr)
        return 3
    if out:
        print(f"python -m attn_oracle repro: wrote {out}; run it with `python {out}`", file=sys.stderr)
    else:
        sys.stdout.write(script)
    return 0
