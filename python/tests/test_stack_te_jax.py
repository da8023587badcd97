"""attn_oracle.stacks.te_jax against the installed transformer-engine wheel's
transformer_engine/jax (skipped without it): TE's metadata passes the metadata
properties on the kinds without a bottom-right term, its bottom-right finding
replays from its fixture, and the planted twin that reads TE's compacted
offsets as slot-indexed fails and shrinks to one document."""
import importlib.util
import subprocess
import sys

import pytest

pytest.importorskip("jax", reason="jax is not installed (scripts/stacks --only te_jax builds the venv)")
if importlib.util.find_spec("transformer_engine") is None:
    pytest.skip("transformer-engine is not installed (scripts/stacks --only te_jax builds the venv)",
                allow_module_level=True)

from stack_checks import documents, run_check, shrunk_case  # noqa: E402
from support import REPO  # noqa: E402


def test_te_metadata_passes_without_bottom_right(tmp_path):
    done, _ = run_check(tmp_path, "planted_jax_stacks:TeJaxWithoutBottomRight", "--cases", "40", "--filter", "metadata/")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]


def test_the_bottom_right_finding_replays(tmp_path):
    fixture = REPO / "fixtures" / "stacks" / "te_jax_bottom_right_query_without_keys_counted.case.json"
    done = subprocess.run([sys.executable, "-m", "attn_oracle", "replay", "attn_oracle.stacks.te_jax:Backend",
                           str(fixture)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "q_seqlens" in done.stdout, done.stdout + done.stderr


def test_the_planted_twin_is_caught_and_shrunk(tmp_path):
    done, _ = run_check(tmp_path, "planted_jax_stacks:TeJaxSlotOffsets", "--cases", "40",
                        "--filter", "metadata/matchesReference")
    assert done.returncode == 1, done.stdout[-4000:]
    case = shrunk_case(done)
    assert documents(case) == 1, case  # one document whose id is not 1
