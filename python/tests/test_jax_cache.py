"""The worker turns on JAX's persistent compilation cache when the backend
imported jax: a fake ``jax`` in sys.modules stands in, so no JAX is needed."""

import sys
import types

import pytest

from attn_oracle import worker


class FakeConfig:
    """The part of ``jax.config`` the worker uses: attribute reads and ``update``."""

    def __init__(self, **values):
        self.jax_compilation_cache_dir = None
        self.jax_persistent_cache_min_compile_time_secs = 1.0
        self.jax_persistent_cache_min_entry_size_bytes = 0
        self.__dict__.update(values)
        self.updates = {}

    def update(self, name, value):
        if not hasattr(self, name):
            raise AttributeError(f"Unrecognized config option: {name}")
        setattr(self, name, value)
        self.updates[name] = value


@pytest.fixture
def fake_jax(monkeypatch):
    jax = types.ModuleType("jax")
    jax.config = FakeConfig()
    monkeypatch.setitem(sys.modules, "jax", jax)
    for name in ("ATTN_ORACLE_JAX_CACHE", "JAX_COMPILATION_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    return jax


def test_the_default_directory_is_the_users_cache_and_small_compiles_are_kept(fake_jax, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    notes = worker.enable_jax_compilation_cache()
    want = str(tmp_path / "attn-oracle" / "jax")
    assert fake_jax.config.updates == {"jax_compilation_cache_dir": want,
                                       "jax_persistent_cache_min_compile_time_secs": 0,
                                       "jax_persistent_cache_min_entry_size_bytes": -1}
    line = f"attn_oracle.worker: JAX compilation cache at {want} (set ATTN_ORACLE_JAX_CACHE=off to disable)"
    assert notes == [line]
    assert capsys.readouterr().err == line + "\n"


def test_without_xdg_the_cache_is_under_home(fake_jax, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    worker.enable_jax_compilation_cache()
    assert fake_jax.config.jax_compilation_cache_dir == str(tmp_path / ".cache" / "attn-oracle" / "jax")


def test_attn_oracle_jax_cache_names_the_directory(fake_jax, monkeypatch, tmp_path):
    monkeypatch.setenv("ATTN_ORACLE_JAX_CACHE", str(tmp_path / "mine"))
    worker.enable_jax_compilation_cache()
    assert fake_jax.config.jax_compilation_cache_dir == str(tmp_path / "mine")


def test_off_leaves_jax_alone(fake_jax, monkeypatch, capsys):
    monkeypatch.setenv("ATTN_ORACLE_JAX_CACHE", "off")
    assert worker.enable_jax_compilation_cache() == []
    assert fake_jax.config.updates == {}
    assert capsys.readouterr().err == ""


def test_a_cache_the_user_set_in_the_environment_is_respected(fake_jax, monkeypatch, capsys):
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/their/cache")
    notes = worker.enable_jax_compilation_cache()
    assert fake_jax.config.updates == {}
    assert notes == ["attn_oracle.worker: JAX compilation cache at /their/cache (set by JAX_COMPILATION_CACHE_DIR)"]
    assert capsys.readouterr().err == notes[0] + "\n"


def test_a_cache_the_module_set_is_respected(fake_jax):
    fake_jax.config.jax_compilation_cache_dir = "/set/by/module"
    notes = worker.enable_jax_compilation_cache()
    assert fake_jax.config.updates == {}
    assert notes == ["attn_oracle.worker: JAX compilation cache at /set/by/module (set by the backend)"]


def test_no_jax_no_cache(monkeypatch, capsys):
    monkeypatch.delitem(sys.modules, "jax", raising=False)
    assert worker.enable_jax_compilation_cache() == []
    assert capsys.readouterr().err == ""


def test_a_jax_without_the_options_says_why_and_serves_on(fake_jax, monkeypatch, tmp_path):
    monkeypatch.setenv("ATTN_ORACLE_JAX_CACHE", str(tmp_path))
    del fake_jax.config.jax_persistent_cache_min_entry_size_bytes
    notes = worker.enable_jax_compilation_cache()
    assert len(notes) == 1 and notes[0].startswith("attn_oracle.worker: JAX compilation cache not turned on: ")


def test_the_hello_carries_the_notes():
    assert worker.hello(object(), notes=["a note"])["notes"] == ["a note"]
    assert "notes" not in worker.hello(object())
