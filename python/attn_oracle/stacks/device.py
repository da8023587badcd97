"""``python -m attn_oracle.stacks device --out DIR``: every GPU check target in one run, sharded.

What ``scripts/stacks --device run`` executes on a machine with a CUDA device
(docs/stacks.md, "On a GPU"). The targets are the registry's entries marked
``gpu=True``; each is split into shards (``check --shard I/N``) and the shards
of all targets run as concurrent processes sharing the one GPU, ``--jobs`` at a
time, every one stopped at a common deadline. Then each target's shard reports
are merged (``attn-oracle report merge``) and DIR gets:

- ``stacks-gpu.md``: the device, the library releases, one row per target
  (release, properties, draws judged, draws/s, wall time) and each failure with
  its shrunk case and rerun line;
- ``runs.json``: the same rows as data;
- ``logs.tar.gz``: every shard's output, report and counterexamples.

Without a CUDA device each target is skipped with one line and the exit status
is 2 ("nothing ran"); never 0 when nothing ran. Exit 1 when a target failed
(beyond its expected failures), timed out or could not run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .registry import STACKS
from .report import judged_and_verdict, judged_of_drawn

LIBRARIES = ("torch", "xformers", "transformers", "jax", "jaxlib", "flax", "maxtext", "numpy")


def gpu_targets(only=()) -> list[tuple[str, str, tuple[str, ...]]]:
    """(module, target, check args) of every GPU entry of the registry (``only``: module names)."""
    return [(s.name, f"attn_oracle.stacks.{s.name}:{t}", s.check_args) for s in STACKS if s.gpu
            for t in s.backends if not only or s.name in only]


def cuda_device() -> str | None:
    """The CUDA device's name, or None when there is none (nvidia-smi, else torch)."""
    if shutil.which("nvidia-smi"):
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True)
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip().splitlines()[0]
    try:
        import torch  # noqa: PLC0415 - only where nvidia-smi is absent

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # noqa: BLE001 - no torch, or a broken CUDA: no device
        return None


def library_versions() -> dict:
    from importlib import metadata

    out = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "absent"
    return out


def _shard_dir(out: Path, target: str, shard: int) -> Path:
    return out / "runs" / target.rsplit(".", 1)[-1].replace(":", "-") / f"shard-{shard}"


def _environment(directory: Path, target: str = "") -> dict:
    """A shard's environment: its own failures directory; JAX told not to take most of the GPU's
    memory at its start (its default), since the shards share the one device; the registry's
    ``environ`` of the target last."""
    own = dict(pair.split("=", 1) for s in STACKS for t in s.backends if f"attn_oracle.stacks.{s.name}:{t}" == target
               for pair in s.environ)
    return {**os.environ, "ATTN_ORACLE_FAILURES_DIR": str(directory / "failures"),
            "XLA_PYTHON_CLIENT_PREALLOCATE": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE", "false"),
            "ATTN_ORACLE_WORKER_TIMEOUT": os.environ.get("ATTN_ORACLE_WORKER_TIMEOUT", "300"), **own}


def _run_shard(job, out: Path, deadline: float, cases: int, seed: int) -> dict:
    target, args, shard, shards = job
    directory = _shard_dir(out, target, shard)
    directory.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "attn_oracle", "check", target, "--cases", str(cases), "--seed", str(seed),
               "--shard", f"{shard}/{shards}", "--report", str(directory), "--no-store", *args]
    start = time.monotonic()
    left = deadline - start
    if left <= 5:
        return {"target": target, "shard": shard, "status": "not started (deadline)", "seconds": 0.0}
    with open(directory / "check.log", "w") as log:
        try:
            rc = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, timeout=left,
                                env=_environment(directory, target)).returncode
            status = str(rc)
        except subprocess.TimeoutExpired:
            status = "timed out"
    return {"target": target, "shard": shard, "status": status, "seconds": time.monotonic() - start}


def _merge(out: Path, target: str, shards: int) -> dict | None:
    reports = [_shard_dir(out, target, i) / "conformance.json" for i in range(1, shards + 1)]
    reports = [str(r) for r in reports if r.exists()]
    if not reports:
        return None
    merged = _shard_dir(out, target, 0).parent / "merged"
    done = subprocess.run([sys.executable, "-m", "attn_oracle", "report", "merge", "--out", str(merged), *reports],
                          capture_output=True, text=True)
    path = merged / "conformance.json"
    if done.returncode != 0 or not path.exists():
        (merged.parent / "merge.log").write_text(done.stdout + done.stderr)
        return None
    return json.loads(path.read_text())


def _row(module: str, target: str, runs: list[dict], report: dict | None) -> dict:
    seconds = max((r["seconds"] for r in runs), default=0.0)
    statuses = sorted({r["status"] for r in runs})
    row = {"module": module, "target": target, "shards": statuses, "wall_s": round(seconds, 1)}
    if report is None:
        row.update(release="-", verdict=f"did not run ({', '.join(statuses)})", judged=0, failures=[], ok=False)
        return row
    judged, verdict, failures = judged_and_verdict(target, report)
    row.update(release=(report.get("backends") or [{}])[0].get("version", "?"), verdict=verdict, judged=judged,
               drawn=judged_of_drawn(report)[1],
               draws_per_s=round(judged / max(seconds, 1e-3), 2), failures=failures,
               ok=report["summary"]["FAILED"] == 0 and report["summary"].get("XPASS", 0) == 0
               and all(s == "0" for s in statuses))
    return row


def render(device: str, versions: dict, rows: list[dict], seconds: float) -> str:
    lines = ["# Stacks on a GPU: report of scripts/stacks --device run", "",
             f"Device: {device}. Libraries: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".",
             f"Wall time of the checks: {seconds:.0f} s.", "",
             "| module | target | device | release | properties | draws judged | draws/s | wall time |",
             "|---|---|---|---|---|---|---|---|"]
    short = device.split(",")[0]
    for r in rows:
        share = f" of {r['drawn']} ({100 * r['judged'] / r['drawn']:.0f}%)" if r.get("drawn") else ""
        lines.append(f"| {r['module']} | `{r['target']}` | {short} | {r['release']} | {r['verdict']} | {r['judged']}{share} | "
                     f"{r.get('draws_per_s', '-')} | {r['wall_s']:.0f} s |")
    failures = [f for r in rows for f in r["failures"]]
    lines += ["", "## Failures and expected failures", ""] + (failures or ["none"])
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m attn_oracle.stacks device")
    parser.add_argument("--out", required=True, help="where the report goes (the device call's $OUT)")
    parser.add_argument("--budget", type=float, default=450, help="seconds for the checks, all shards together")
    parser.add_argument("--jobs", type=int, default=0, help="concurrent check processes (default: the cores, at most 16)")
    parser.add_argument("--shards", type=int, default=0, help="shards a target (default: jobs / targets, at least 1)")
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--seed", type=int, default=20261125)
    parser.add_argument("--only", default="", help="module names, comma-separated")
    # For testing the run itself where no GPU is: these targets instead of the registry's, no device needed.
    parser.add_argument("--targets", default="", help=argparse.SUPPRESS)
    parser.add_argument("--without-device", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    targets = ([(t.split(":")[0], t, ()) for t in args.targets.split(",")] if args.targets
               else gpu_targets(tuple(filter(None, args.only.split(",")))))
    if not targets:
        print("attn_oracle.stacks device: the registry names no GPU target" + (f" among {args.only}" if args.only else ""))
        return 2
    device = "none (--without-device)" if args.without_device else cuda_device()
    if device is None:
        for _, target, _ in targets:
            print(f"attn_oracle.stacks device: {target} skipped: no CUDA device here")
        print(f"attn_oracle.stacks device: nothing ran ({len(targets)} GPU targets, no CUDA device); "
              "run it on a machine with one (docs/stacks.md, 'On a GPU')")
        return 2
    versions = library_versions()
    print(f"attn_oracle.stacks device: {device}; " + ", ".join(f"{k} {v}" for k, v in versions.items()), flush=True)
    jobs = args.jobs or min(16, os.cpu_count() or 1)
    shards = args.shards or max(1, jobs // len(targets))
    work = [(target, check_args, i, shards) for _, target, check_args in targets for i in range(1, shards + 1)]
    start = time.monotonic()
    deadline = start + args.budget
    with ThreadPoolExecutor(jobs) as pool:
        runs = list(pool.map(lambda job: _run_shard(job, out, deadline, args.cases, args.seed), work))
    seconds = time.monotonic() - start
    rows = []
    for module, target, _ in targets:
        mine = [r for r in runs if r["target"] == target]
        rows.append(_row(module, target, mine, _merge(out, target, shards)))
        print(f"attn_oracle.stacks device: {target}: {rows[-1]['verdict']}, {rows[-1]['judged']} judged", flush=True)
    (out / "stacks-gpu.md").write_text(render(device, versions, rows, seconds))
    (out / "runs.json").write_text(json.dumps({"device": device, "versions": versions, "seconds": seconds,
                                               "rows": rows}, indent=1))
    with tarfile.open(out / "logs.tar.gz", "w:gz") as tar:
        tar.add(out / "runs", arcname="runs")
    shutil.rmtree(out / "runs")  # only what is tarred comes back (8 files at most)
    print(f"attn_oracle.stacks device: wrote {out / 'stacks-gpu.md'} ({seconds:.0f} s)")
    return 0 if all(r["ok"] for r in rows) else 1
