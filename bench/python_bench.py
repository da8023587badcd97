"""The Python path, measured in one run on one machine (scripts/bench python):

  1. draws per second and XLA compilations, with and without --shape-stable, on
     examples/jax_backend.py (the attention properties) and on a JAX metadata
     backend (bench/python/jax_backends.py; the metadata properties), and on the
     JAX example declaring one compiled size in its domain; JAX's persistent
     cache off so that every compilation is paid;
  2. `python -m attn_oracle check` against the pytest plugin, on the same
     backend and seed;
  3. a worker's start-up: from its process start to its hello, NumPy and JAX.

Run with a Python that has the attn_oracle package and jax, from the
repository root: python bench/python_bench.py [--cases N] [--results FILE].
Prints a markdown table; --results also writes it to FILE.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
JAX_ATTENTION = "bench.python.jax_backends:Attention"
JAX_ONE_SIZE = "bench.python.jax_backends:AttentionOneSize"
JAX_METADATA = "bench.python.jax_backends:Metadata"
NUMPY = "examples.numpy_backend:Backend"


def environment(work: Path, **extra) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "ATTN_ORACLE_FAILURES_DIR": str(work / "failures"), "ATTN_ORACLE_JAX_CACHE": "off", **extra}
    env.pop("ATTN_ORACLE_SHAPE_STABLE", None)
    return env


def timed(argv, env) -> tuple[float, subprocess.CompletedProcess]:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=3600)
    return time.perf_counter() - start, done


def check_run(work: Path, target: str, prefix: str, cases: int, shape_stable: bool) -> dict:
    """One `check` of `prefix` on `target`: wall time, draws, compilations."""
    counter, report = work / "compiles.txt", work / "report"
    counter.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "attn_oracle", "check", target, "--filter", prefix, "--cases", str(cases),
            "--no-store", "--report", str(report)] + (["--shape-stable"] if shape_stable else [])
    seconds, done = timed(argv, environment(work, ATTN_ORACLE_BENCH_COMPILES=str(counter)))
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    results = json.loads((report / "conformance.json").read_text())["results"]
    draws = sum(r["draws"]["total"] for r in results)
    judged = sum(r["draws"]["judged"] for r in results)
    return {"seconds": seconds, "draws": draws, "judged": judged, "compiles": int(counter.read_text()) if counter.exists() else 0,
            "verdict": "passed" if done.returncode == 0 else "FAILED"}


def pytest_run(work: Path, target: str, cases: int) -> float:
    (work / "pytest.ini").write_text(f"[pytest]\nattn_oracle_backend = {target}\n"
                                     f"attn_oracle_args = --cases {cases} --no-store\n")
    seconds, done = timed([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(work),
                           str(work)], environment(work))
    if done.returncode != 0:
        sys.exit(f"pytest failed:\n{done.stdout[-3000:]}")
    return seconds


def worker_start(target: str, work: Path, repeats: int = 3) -> float:
    """Median seconds from starting `python -m attn_oracle.worker TARGET` to its first byte (the hello)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        worker = subprocess.Popen([sys.executable, "-m", "attn_oracle.worker", target], cwd=REPO,
                                  env=environment(work), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL)
        worker.stdout.read(1)
        times.append(time.perf_counter() - start)
        worker.stdin.close()
        worker.wait(timeout=60)
    return sorted(times)[len(times) // 2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=30, help="draws per property (default 30)")
    parser.add_argument("--results", help="also write the markdown to this file")
    args = parser.parse_args()
    import jax  # noqa: F401  (the versions line; fails early without jax)

    lines = [f"Python {sys.version.split()[0]}, jax {jax.__version__}, {os.cpu_count()} CPUs; "
             f"{args.cases} draws per property; JAX's persistent cache off.", "",
             "| backend | properties | draws (judged) | shape-stable | wall s | draws/s | XLA compilations | verdict |",
             "|---|---|---|---|---|---|---|---|"]
    speedups = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for target, prefix in ((JAX_ATTENTION, "attention/"), (JAX_METADATA, "metadata/")):
            runs = {stable: check_run(work, target, prefix, args.cases, stable) for stable in (False, True)}
            if target == JAX_ATTENTION:  # a declared menu: the sizes the backend was compiled for
                runs["declared"] = check_run(work, JAX_ONE_SIZE, prefix, args.cases, False)
            for stable, r in runs.items():
                name = "AttentionOneSize (declared menu)" if stable == "declared" else target.split(':')[1]
                lines.append(f"| {name} | {prefix} | {r['draws']} ({r['judged']}) | {'yes' if stable else 'no'} | "
                             f"{r['seconds']:.1f} | {r['draws'] / r['seconds']:.1f} | {r['compiles']} | {r['verdict']} |")
            rate = {s: runs[s]["draws"] / runs[s]["seconds"] for s in runs}
            speedups.append(f"{target.split(':')[1]}: {rate[True] / rate[False]:.1f}x draws/s, "
                            f"{runs[False]['compiles']} -> {runs[True]['compiles']} compilations")
            if "declared" in runs:
                speedups.append(f"declaring one compiled size: {rate['declared'] / rate[False]:.1f}x draws/s, "
                                f"{runs['declared']['compiles']} compilation(s)")
        check = check_run(work, NUMPY, "", args.cases, False)["seconds"]
        plugin = pytest_run(work, NUMPY, args.cases)
        starts = {name: worker_start(target, work) for name, target in (("NumPy", NUMPY), ("JAX", JAX_ATTENTION))}
    lines += ["", "Shape-stable draws: " + "; ".join(speedups) + ".", "",
              f"Every property on the NumPy example, {args.cases} draws each: `check` {check:.1f} s, the pytest "
              f"plugin {plugin:.1f} s ({plugin / check:.2f}x).", "",
              "Worker start to hello (median of 3): " +
              ", ".join(f"{name} {seconds:.2f} s" for name, seconds in starts.items()) + "."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.results:
        Path(args.results).write_text(text)


if __name__ == "__main__":
    main()
