"""JAX's persistent compilation cache: a second process compiles from it, bit-identically."""

import json
import os
import subprocess
import sys
import textwrap

import jax
import pytest

from purejaxppo._cache import default_cache_dir, enable_compilation_cache, host_tag

pytestmark = pytest.mark.timeout(600)

CODE = textwrap.dedent(
    """
    import hashlib, json, sys, jax, numpy as np
    from purejaxppo import PPOConfig, make_train
    from purejaxppo.engine import enable_compilation_cache
    hits = []
    jax.monitoring.register_event_listener(
        lambda event, **_: hits.append(event) if event.endswith("/cache_hits") else None)
    enable_compilation_cache(sys.argv[1])
    cfg = PPOConfig(maze="medium", num_envs=4, num_steps=32, minibatch_size=64,
                    update_epochs=2, total_timesteps=384)
    state, metrics = make_train(cfg)(jax.random.PRNGKey(0))
    digest = hashlib.sha256()
    for x in jax.tree.leaves((state.params, metrics)):
        digest.update(np.asarray(x).tobytes())
    print("RESULT" + json.dumps({"hits": len(hits), "digest": digest.hexdigest()}))
    """
)


def run(cache_dir) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([sys.executable, "-c", CODE, str(cache_dir)], capture_output=True,
                         text=True, timeout=500, env=env)  # fmt: skip
    assert out.returncode == 0, out.stderr[-4000:]
    line = [x for x in out.stdout.splitlines() if x.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT") :])


@pytest.mark.subprocess
def test_a_second_process_compiles_from_the_cache_bit_identically(tmp_path):
    cold = run(tmp_path / "cache")
    entries = list((tmp_path / "cache").iterdir())
    assert cold["hits"] == 0 and entries  # the first process compiled and wrote entries
    warm = run(tmp_path / "cache")
    assert warm["hits"] >= 1  # ... the second read them
    assert warm["digest"] == cold["digest"]  # the same parameters and metrics, bit for bit
    assert len(list((tmp_path / "cache").iterdir())) == len(entries)  # nothing recompiled


def test_the_default_directory_is_per_cpu_and_overridable(monkeypatch, tmp_path):
    monkeypatch.delenv("PUREJAXPPO_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "purejaxppo" / "xla" / host_tag()
    assert host_tag() == host_tag() and len(host_tag().rsplit("-", 1)[1]) == 12
    monkeypatch.setenv("PUREJAXPPO_CACHE_DIR", str(tmp_path / "mine"))
    assert default_cache_dir() == tmp_path / "mine"


def test_an_unusable_cache_directory_is_one_line(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(ValueError, match="cannot create it") as e:
        enable_compilation_cache(tmp_path / "file" / "cache")
    assert "\n" not in str(e.value) and "--no-compile-cache" in str(e.value)


def test_the_suites_opt_in_cache_is_back_on_after_an_in_process_cli_run(monkeypatch, tmp_path):
    """``PUREJAXPPO_TEST_CACHE`` (tests/conftest.py): `cli` turns the CLI's cache off after an
    in-process run; the suite's own cache, where one is set, must come back on."""
    import conftest

    before = conftest.TEST_CACHE
    monkeypatch.setattr(conftest, "TEST_CACHE", str(tmp_path / "suite"))
    try:
        conftest.compilation_cache_off()  # what `cli` does after an in-process CLI run
        assert jax.config.jax_compilation_cache_dir == str(tmp_path / "suite")
        assert (tmp_path / "suite").is_dir()
    finally:
        monkeypatch.setattr(conftest, "TEST_CACHE", before)
        conftest.compilation_cache_off()
    assert jax.config.jax_compilation_cache_dir == before  # None unless the suite has one
