"""One JAX CPU device per core (`purejaxppo._cpu_devices`), set when purejaxppo is imported.

JAX fixes its CPU device count when it starts, so each check runs in a fresh interpreter with
its own ``PUREJAXPPO_CPU_DEVICES`` (the suite itself pins 1, tests/conftest.py) and reports
back as JSON. Counts are given explicitly: nothing here depends on this machine's cores.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(900)]


def run_fresh(code: str, cpu_devices: str | None, xla_flags: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PUREJAXPPO_CPU_DEVICES")}
    env["JAX_PLATFORMS"] = "cpu"
    if cpu_devices is not None:
        env["PUREJAXPPO_CPU_DEVICES"] = cpu_devices
    if xla_flags is not None:
        env["XLA_FLAGS"] = xla_flags
    script = "import json, os, warnings\nout = {}\n" + textwrap.dedent(code)
    script += "\nprint('RESULT' + json.dumps(out))\n"
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=800
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")][-1]
    return {**json.loads(line[len("RESULT") :]), "stderr": proc.stderr}


COUNT = """
import purejaxppo, jax
out["devices"] = jax.device_count()
out["cores"] = len(os.sched_getaffinity(0))
"""


@pytest.mark.parametrize(("setting", "expected"), [("2", 2), ("3", 3), ("1", 1), ("auto", None)])
def test_import_gives_jax_the_requested_cpu_devices(setting, expected):
    out = run_fresh(COUNT, setting)
    assert out["devices"] == (out["cores"] if expected is None else expected)


def test_a_count_the_user_set_wins():
    # XLA's flag, as the sharding tests use it, wins over the variable.
    out = run_fresh(COUNT, "2", xla_flags="--xla_force_host_platform_device_count=3")
    assert out["devices"] == 3
    # jax's own option, set after the import but before JAX's first operation.
    out = run_fresh(
        """
        import purejaxppo, jax
        jax.config.update("jax_num_cpu_devices", 1)
        out["devices"] = jax.device_count()
        """,
        "2",
    )
    assert out["devices"] == 1
    # JAX already started before the import: its devices stay as they are, no error.
    out = run_fresh(
        """
        import jax
        jax.numpy.zeros(1)
        import purejaxppo
        from purejaxppo._cpu_devices import use_cpu_devices
        out["set"] = use_cpu_devices(2)
        out["devices"] = jax.device_count()
        """,
        "2",
    )
    assert out["set"] is None and out["devices"] == 1


def test_a_bad_count_warns_in_python_and_is_refused_by_the_command():
    out = run_fresh(COUNT, "0")
    assert out["devices"] == 1
    assert "PUREJAXPPO_CPU_DEVICES='0': need a positive number of CPU devices" in out["stderr"]
    command = Path(sys.executable).with_name("purejaxppo")
    if not command.exists():
        pytest.skip("the purejaxppo command is not installed next to this Python")
    env = {**os.environ, "PUREJAXPPO_CPU_DEVICES": "two"}
    proc = subprocess.run(
        [str(command), "train", "--total-timesteps", "8192"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "purejaxppo: PUREJAXPPO_CPU_DEVICES='two': need a positive number of CPU devices (1: "
        "JAX's default of one), or 'auto' for one per core."
    ]


def test_agents_spread_over_two_cpu_devices_train_as_on_one():
    out = run_fresh(
        """
        import numpy as np, jax
        from purejaxppo import PPOConfig, make_train, sweep
        from purejaxppo._engine import Engine, engine_for
        from purejaxppo._placement import mesh_for
        SMALL = PPOConfig(maze="medium", num_envs=4, num_steps=32, minibatch_size=64,
                          update_epochs=2, total_timesteps=384)
        out["devices"] = jax.device_count()
        # One agent is not padded onto the second device: the solo program, bitwise.
        one = sweep(SMALL, seeds=[3])
        state, metrics = make_train(SMALL)(jax.random.PRNGKey(3))
        out["one_mesh"] = mesh_for(None, 1)
        out["one_bitwise"] = all(
            np.array_equal(np.asarray(a)[0], np.asarray(b), equal_nan=True)
            for a, b in zip(jax.tree.leaves((one.metrics, one.state.params)),
                            jax.tree.leaves((metrics, state.params))))
        # Three agents: sharded over both devices (one padded), equal to one device's run
        # within the suite's across-shapes tolerance (conftest.ACROSS_SHAPES).
        spread = sweep(SMALL, seeds=3, lr=[3e-4])
        single = sweep(SMALL, seeds=3, lr=[3e-4], mesh=False)
        out["close"] = all(
            np.allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5, equal_nan=True)
            for a, b in zip(jax.tree.leaves((spread.metrics, spread.state)),
                            jax.tree.leaves((single.metrics, single.state))))
        engine = Engine(SMALL)
        out["engine_devices"] = engine.num_devices
        # CPU devices share the host's memory: each plans with half of it.
        out["host_share"] = engine._host_share()
        """,
        "2",
    )
    assert out["devices"] == 2
    assert out["one_mesh"] is False and out["one_bitwise"]
    assert out["close"]
    assert out["engine_devices"] == 2 and out["host_share"] == 2
