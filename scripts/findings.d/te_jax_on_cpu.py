"""Runs a TransformerEngine JAX reproduction on a machine without CUDA: te_jax_on_cpu.py [--te DIR] SCRIPT.

The reproductions under docs/findings/ import ``transformer_engine.jax.attention`` as a maintainer
does on a CUDA machine. Here TE's native library (``transformer_engine_jax``, built from a source
distribution that needs CUDA) is absent and ``transformer_engine/__init__.py`` refuses to import
without it. The metadata code the scripts call is Python and only compares the native enums, so
this runner registers:

- ``transformer_engine_jax``: the enum names as distinct strings, and ``nvte_get_qkv_format``;
- ``transformer_engine`` and ``transformer_engine.jax`` as bare packages over DIR (the installed
  release's, or an unpacked wheel's ``transformer_engine/``), so their ``__init__`` does not run;
- ``transformer_engine.jax.cpp_extensions``: empty (the metadata functions never call it);

then runs SCRIPT as ``__main__``, unchanged. The same stand-in as attn_oracle.stacks.te_jax's
loader, written without attn-oracle so that the verification venvs hold the stack alone.
"""

import importlib.util
import runpy
import sys
import types
from pathlib import Path


class _Names(type):
    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return f"{cls.__name__}.{name}"


def _native_stub() -> types.ModuleType:
    stub = types.ModuleType("transformer_engine_jax")
    for name in ("NVTE_Bias_Type", "NVTE_Mask_Type", "NVTE_QKV_Layout", "NVTE_QKV_Format", "NVTE_Softmax_Type"):
        setattr(stub, name, _Names(name, (), {}))

    def nvte_get_qkv_format(layout):
        name = layout.split(".")[-1]
        return "NVTE_QKV_Format." + ("NVTE_THD" if name.startswith("NVTE_T") else
                                     "NVTE_SBHD" if name.startswith("NVTE_SB") else "NVTE_BSHD")

    stub.nvte_get_qkv_format = nvte_get_qkv_format
    return stub


def _package(name: str, path: Path) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__path__ = [str(path)]
    sys.modules[name] = module
    return module


def install(te_dir: Path) -> None:
    sys.modules["transformer_engine_jax"] = _native_stub()
    te = _package("transformer_engine", te_dir)
    te.jax = _package("transformer_engine.jax", te_dir / "jax")
    te.jax.cpp_extensions = _package("transformer_engine.jax.cpp_extensions", te_dir / "jax" / "cpp_extensions")
    te.jax.cpp_extensions.__path__ = []


def main(argv) -> int:
    te_dir = None
    if argv[:1] == ["--te"]:
        te_dir, argv = Path(argv[1]), argv[2:]
    if len(argv) != 1:
        print("usage: te_jax_on_cpu.py [--te DIR] SCRIPT", file=sys.stderr)
        return 2
    if te_dir is None:
        spec = importlib.util.find_spec("transformer_engine")
        te_dir = Path(list(spec.submodule_search_locations)[0])
    install(te_dir)
    print(f"te_jax_on_cpu: transformer_engine from {te_dir} (native enums stubbed)", file=sys.stderr)
    sys.argv = argv
    runpy.run_path(argv[0], run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
