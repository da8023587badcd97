"""pytest plugin: the conformance suite as pytest tests, one per property.

Name the backend (a ``MODULE:CLASS`` that ``python -m attn_oracle.worker``
serves) in the project's pytest configuration, or on the command line::

    # pyproject.toml
    [tool.pytest.ini_options]
    attn_oracle_backend = "mypkg.kernels:Backend"
    attn_oracle_args = "--cases 50"          # optional: more attn-oracle check options
    attn_oracle_shape_stable = true          # optional: sizes from a menu (jit / torch.compile backends)

    $ pytest --attn-oracle-backend mypkg.kernels:Backend --attn-oracle-args "--cases 50"

Every property of ``attn-oracle check --list`` then becomes a test item
``attn-oracle[mypkg.kernels:Backend]::attention/matchesReference`` that passes,
fails (showing the property's counterexample in a line or three, its replay line
and the repro line that writes a standalone script) or skips
(a capability the backend lacks, every draw declined) as the property did.
``-k``, ``-x`` and ``--deselect`` select properties as they select tests.
The selected properties share one ``attn-oracle check --backend exec:...
--filter <id>,<id>,...`` run, which the first of them to run starts: one
check process and one worker for the session, not one per property. Each item
then reads its own result from that run's report. The run uses the failure
store as ``check`` does: the failures of the last run are checked first and the
test's output says so (``store: 1 saved failure replayed: 1 still fails``);
``ATTN_ORACLE_STORE`` and ``--attn-oracle-args "--store DIR"`` /
``"--no-store"`` choose it.

Without the option the plugin does nothing. Instead of it, a test module can
hold one line, :func:`conformance_test`::

    from attn_oracle.pytest_plugin import conformance_test
    test_conformance = conformance_test("mypkg.kernels:Backend", "--cases", "50")

Tested by python/tests/test_pytest_plugin.py.
"""

from __future__ import annotations

import functools
import json
import os
import shlex
import tempfile
from dataclasses import dataclass
from typing import Callable, Sequence

import pytest

from . import bundled

PROPERTY_OUTCOMES = {"passed": "passed", "skipped": "skipped", "xfail": "xfailed"}


# ---------------------------------------------------------------------------
# Running one property
# ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def property_ids(filter_prefix: str = "") -> tuple[str, ...]:
    """The ids of the suite's properties (``attn-oracle check --list``)."""
    argv = ["check", "--list"] + (["--filter", filter_prefix] if filter_prefix else [])
    done = bundled.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"attn-oracle check --list failed ({done.returncode}): {done.stderr.strip()}")
    return tuple(line for line in done.stdout.splitlines() if line)


@dataclass(frozen=True)
class PropertyRun:
    """One property's run: its verdict (passed, FAILED, skipped, xfail, XPASS), the
    check's output and, when it did not pass, why."""

    property_id: str
    verdict: str
    output: str
    message: str

    @property
    def outcome(self) -> str:
        """pytest's word for it: passed, failed, skipped or xfailed (listed in --xfails)."""
        return PROPERTY_OUTCOMES.get(self.verdict, "failed")


def _result_run(property_id: str, results: list, output: str) -> PropertyRun:
    """One property's run, read from a check report's results."""
    # --filter takes prefixes: other properties may have run too; this one is ours.
    mine = [r for r in results if r.get("property") == property_id]
    if not mine:
        return PropertyRun(property_id, "FAILED", output, "the report has no result for this property")
    result = mine[0]
    failures = result.get("failures") or [{}]
    # A verdict's own words first: an expected-failure note, or that no failure
    # is a wrong answer on ordinary inputs; else the highest-ranked failure.
    message = (result.get("note") or result.get("failure_summary") or result.get("message")
               or failures[0].get("message", ""))
    return PropertyRun(property_id, result["verdict"], output, message)


def run_properties(target: str, property_ids: Sequence[str], check_args: Sequence[str] = ()) -> dict[str, PropertyRun]:
    """Runs ``attn-oracle check`` once on several properties of the backend
    ``target`` (MODULE:CLASS): one check process and one worker for all of them."""
    with tempfile.TemporaryDirectory(prefix="attn-oracle-pytest-") as report:
        argv = ["check", target, "--filter", ",".join(property_ids), "--report", report, *check_args]
        done = bundled.run(argv, capture_output=True, text=True)
        output = done.stdout + done.stderr
        try:
            with open(os.path.join(report, "conformance.json")) as f:
                results = json.load(f)["results"]
        except (OSError, ValueError, KeyError):
            failed = f"attn-oracle check exited {done.returncode}"
            return {p: PropertyRun(p, "FAILED", output, failed) for p in property_ids}
    return {p: _result_run(p, results, output) for p in property_ids}


def run_property(target: str, property_id: str, check_args: Sequence[str] = ()) -> PropertyRun:
    """Runs ``attn-oracle check`` on one property of the backend ``target`` (MODULE:CLASS)."""
    return run_properties(target, [property_id], check_args)[property_id]


def _distributed(config: pytest.Config) -> bool:
    """True in a pytest-xdist worker: it holds every item but runs only those it
    is sent, so its items run a property each, as before they shared a run."""
    return hasattr(config, "workerinput")


class SharedRun:
    """One check run for every selected property of a backend, started by the
    first of them to run; ``selected`` names them (the session's items, after
    ``-k`` and ``--deselect``)."""

    def __init__(self, target: str, check_args: Sequence[str]):
        self.target, self.check_args = target, list(check_args)
        self.runs: dict[str, PropertyRun] | None = None

    def get(self, property_id: str, selected: Callable[[], list[str]]) -> PropertyRun:
        if self.runs is None:
            self.runs = run_properties(self.target, selected() or [property_id], self.check_args)
        if property_id not in self.runs:  # an item the first one did not see: run it alone
            self.runs[property_id] = run_property(self.target, property_id, self.check_args)
        return self.runs[property_id]


def _section(output: str, property_id: str) -> str:
    """The check's lines about one property (its verdict line, mismatches,
    counterexamples, replay and rerun lines); all of it when they cannot be found."""
    lines = output.splitlines()
    starts = [i for i, line in enumerate(lines) if line.split()[1:2] == [property_id]]
    if not starts:
        return output
    end = next((i for i in range(starts[0] + 1, len(lines)) if not lines[i].startswith("    ")), len(lines))
    return "\n".join(lines[starts[0]:end])


def _failure_text(run: PropertyRun) -> str:
    return f"{run.property_id}: {run.verdict}: {run.message}\n\n{_section(run.output, run.property_id)}"


class PropertyFailed(Exception):
    def __init__(self, run: PropertyRun):
        super().__init__(_failure_text(run))
        self.run = run


def judge(run: PropertyRun) -> None:
    """Turns a property's verdict into pytest's: returns on a pass,
    ``pytest.skip`` on a skip, ``pytest.xfail`` on an expected failure
    (``--xfails``), raises :class:`PropertyFailed` with the check's output
    (counterexample, replay line) otherwise."""
    if run.outcome == "skipped":
        pytest.skip(f"{run.property_id}: {run.message or 'skipped'}")
    if run.outcome == "xfailed":
        pytest.xfail(f"{run.property_id}: {run.message or 'an expected failure'}")
    if run.outcome == "failed":
        raise PropertyFailed(run)


def check_property(target: str, property_id: str, check_args: Sequence[str] = ()) -> None:
    """Runs one property and judges it (:func:`judge`)."""
    judge(run_property(target, property_id, check_args))


def conformance_test(target: str, *check_args: str):
    """A test function parametrized over every property: assign it to a
    ``test_*`` name in a test module to run the suite on ``target``. The
    selected properties share one check run."""
    shared = SharedRun(target, check_args)

    @pytest.mark.parametrize("property_id", property_ids())
    def test_property(property_id: str, request: pytest.FixtureRequest) -> None:
        def selected() -> list[str]:
            if _distributed(request.config):
                return [property_id]
            return [item.callspec.params["property_id"] for item in request.session.items
                    if getattr(item, "function", None) is test_property and hasattr(item, "callspec")]

        judge(shared.get(property_id, selected))

    return test_property


# ---------------------------------------------------------------------------
# The plugin: items from the configuration
# ---------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("attn-oracle")
    group.addoption("--attn-oracle-backend", metavar="MODULE:CLASS",
                    help="run the attn-oracle conformance suite on this Python backend, one test per property")
    group.addoption("--attn-oracle-args", metavar="ARGS",
                    help="more `attn-oracle check` options, e.g. \"--cases 50 --seed 7\"")
    group.addoption("--attn-oracle-shape-stable", action="store_true", default=None,
                    help="draw sizes from a small menu (`attn-oracle check --shape-stable`), so that a jitted or "
                         "torch.compile backend compiles a few times a run instead of once per draw")
    parser.addini("attn_oracle_backend", "MODULE:CLASS of a backend to run the attn-oracle conformance suite on")
    parser.addini("attn_oracle_args", "more `attn-oracle check` options for that run")
    parser.addini("attn_oracle_shape_stable", "draw sizes from a small menu (true/false)", type="bool", default=False)


def _setting(config: pytest.Config, name: str) -> str:
    return config.getoption(f"--{name.replace('_', '-')}") or config.getini(name) or ""


class PropertyItem(pytest.Item):
    """One property of the suite on the configured backend."""

    def __init__(self, *, target: str, property_id: str, check_args: Sequence[str], **kwargs):
        super().__init__(**kwargs)
        self.target, self.property_id, self.check_args = target, property_id, list(check_args)

    def runtest(self) -> None:
        suite = self.parent

        def selected() -> list[str]:
            if _distributed(self.config):
                return [self.property_id]
            return [item.property_id for item in self.session.items
                    if isinstance(item, PropertyItem) and item.parent is suite]

        judge(suite.shared.get(self.property_id, selected))

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, PropertyFailed):
            return _failure_text(excinfo.value.run)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"attn-oracle check --filter {self.property_id}"


class Suite(pytest.Collector):
    """Every property, for one backend."""

    def __init__(self, *, target: str, check_args: Sequence[str], **kwargs):
        super().__init__(**kwargs)
        self.target, self.check_args = target, list(check_args)
        self.shared = SharedRun(target, check_args)

    def collect(self):
        for property_id in property_ids():
            yield PropertyItem.from_parent(self, name=property_id, target=self.target, property_id=property_id,
                                           check_args=self.check_args)


@pytest.hookimpl(tryfirst=True)  # before -k / -m deselect the items
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    target = _setting(config, "attn_oracle_backend")
    if not target:
        return
    if not bundled.is_target(target):
        raise pytest.UsageError(f"attn_oracle_backend: expected MODULE:CLASS, found {target!r}")
    check_args = shlex.split(_setting(config, "attn_oracle_args"))
    if config.getoption("--attn-oracle-shape-stable") or config.getini("attn_oracle_shape_stable"):
        check_args.append("--shape-stable")
    name = f"attn-oracle[{target}]"
    suite = Suite.from_parent(session, name=name, nodeid=name, target=target, check_args=check_args)
    collected = list(suite.collect())
    items.extend(collected)
    # Reported like any collector's items, so that the counts and -k see them.
    config.hook.pytest_collectreport(report=pytest.CollectReport(suite.nodeid, "passed", None, collected))


def pytest_report_header(config: pytest.Config) -> str | None:
    target = _setting(config, "attn_oracle_backend")
    return f"attn-oracle: conformance suite on {target}" if target else None
