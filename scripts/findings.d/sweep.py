"""sweep.py MODE SCRIPT LABEL=DIR...: runs SCRIPT once per release in one process, one line each.

MODE is ``te`` (DIR is a release's ``transformer_engine/`` directory, loaded through
te_jax_on_cpu.py's stand-in; ``installed`` for the venv's own) or ``path`` (DIR goes first
on sys.path, ``installed`` for none: another megatron-core's files, a Fast-LLM checkout).
Before each run the stack's modules are dropped, so each release is imported afresh, while
jax or torch is imported once. Prints ``LABEL<TAB>PASS|FAIL<TAB>why`` per release: PASS
when the script ran to its end, FAIL with the exception it ended in.
"""

import contextlib
import importlib.util
import io
import runpy
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import te_jax_on_cpu  # noqa: E402

STACK_MODULES = ("transformer_engine", "megatron", "fast_llm")


def drop_stack_modules() -> None:
    for name in list(sys.modules):
        if name.split(".")[0] in STACK_MODULES or name == "transformer_engine_jax":
            del sys.modules[name]


def run(mode: str, script: str, label: str, where: str) -> str:
    drop_stack_modules()
    path = sys.path[:]
    if mode == "te":
        te_dir = where if where != "installed" else \
            list(importlib.util.find_spec("transformer_engine").submodule_search_locations)[0]
        te_jax_on_cpu.install(Path(te_dir))
    elif where != "installed":
        sys.path.insert(0, where)
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(script, run_name="__main__")
        verdict, why = "PASS", out.getvalue().strip().splitlines()[-1]
    except BaseException as e:  # noqa: BLE001 - the script's end, whatever it is, is the verdict
        verdict, why = "FAIL", f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    finally:
        sys.path[:] = path
    return f"{label}\t{verdict}\t{why[:120]}"


def main(argv) -> int:
    mode, script, *releases = argv
    for release in releases:
        label, where = release.split("=", 1)
        print(run(mode, script, label, where), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
