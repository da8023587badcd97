"""report/stacks.md from scripts/stacks' runs: one row per check target, then each failure.

``python -m attn_oracle.stacks report DIR`` reads DIR/runs.tsv (env, module,
target, exit status or "skipped", wall time in ms) and each target's
DIR/TARGET/conformance.json, and prints the Markdown.
"""

from __future__ import annotations

import json
from pathlib import Path


def _target_dir(directory: Path, target: str) -> Path:
    return directory / target.rsplit(".", 1)[-1].replace(":", "-")


def _load(directory: Path, target: str):
    path = _target_dir(directory, target) / "conformance.json"
    return json.loads(path.read_text()) if path.exists() else None


def judged_of_drawn(report: dict) -> tuple[int, int]:
    """(draws judged, draws drawn) over the properties that drew: one skipped for a capability the backend
    lacks drew nothing, but one whose every draw was declined counts them all, unjudged (a target that
    declines everything must not read 100%)."""
    results = [r for r in report["results"] if r["verdict"] != "skipped" or r.get("draws", {}).get("declined", 0)]
    return (sum(r.get("draws", {}).get("judged", 0) for r in results),
            sum(r.get("draws", {}).get("total", 0) for r in results))


def judged_and_verdict(target: str, report: dict) -> tuple[int, str, list[str]]:
    """(draws judged, the properties' verdicts in words, each failure's Markdown) of one check report."""
    results = report["results"]
    judged = judged_of_drawn(report)[0]
    summary = report["summary"]
    verdict = (f"{summary['passed']} passed, {summary['FAILED']} failed, {summary['xfail']} expected failures"
               f"{', ' + str(summary['XPASS']) + ' unexpected passes' if summary['XPASS'] else ''}, "
               f"{summary['skipped']} skipped")
    failures = [f"- `{target}` {r['property']}{' (expected failure)' if r['verdict'] == 'xfail' else ''}: "
                f"{f['message']}  \n  shrunk: `{f['counterexample']}`  \n  rerun: `{f['rerun']}`"
                for r in results if r["verdict"] in ("FAILED", "xfail") for f in r.get("failures", [])[:1]]
    return judged, verdict, failures


def _row(env, module, target, status, millis, report) -> tuple[str, list[str]]:
    if status == "skipped" or report is None:
        why = "skipped (see scripts/stacks' output)" if status == "skipped" else f"did not run (exit {status}; see its .log)"
        return f"| {module} | `{target}` | - | {why} | - | - | - |", []
    judged, verdict, failures = judged_and_verdict(target, report)
    seconds = max(int(millis), 1) / 1000
    version = (report["backends"] or [{}])[0].get("version", "?")
    worst = [r["worst_error_to_budget"] for r in report["results"] if r.get("worst_error_to_budget") is not None]
    drawn = judged_of_drawn(report)[1]
    share = f" of {drawn} ({100 * judged / drawn:.0f}%)" if drawn else ""
    return (f"| {module} | `{target}` | {version} | {verdict} (exit {status}) | {judged}{share} | "
            f"{judged / seconds:.1f} | {seconds:.0f} s{f', worst {max(worst):.2f}' if worst else ''} |", failures)


def render(directory: Path) -> str:
    lines = ["# Stacks: report of scripts/stacks", "",
             "| module | target | stack release | properties | draws judged | draws/s | wall time |",
             "|---|---|---|---|---|---|---|"]
    failures: list[str] = []
    runs = (directory / "runs.tsv").read_text().splitlines() if (directory / "runs.tsv").exists() else []
    for line in runs:
        env, module, target, status, millis = line.split("\t")
        row, failed = _row(env, module, target, status, millis, None if status == "skipped" else _load(directory, target))
        lines.append(row)
        failures += failed
    lines += ["", "## Failures and expected failures", ""] + (failures or ["none"])
    return "\n".join(lines) + "\n"
