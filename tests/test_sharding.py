"""The agent axis sharded over devices: 4 CPU devices forced in a subprocess.

XLA's CPU device count is fixed when JAX starts, so each check runs in a fresh interpreter
with ``--xla_force_host_platform_device_count=4`` and reports back as JSON.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(900)]

PRELUDE = """
import json, dataclasses, numpy as np, jax, jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec
from purejaxppo import PPOConfig, sweep, resume_sweep
from purejaxppo.engine import agent_mesh
from purejaxppo._engine import Engine
SMALL = PPOConfig(maze="medium", num_envs=4, num_steps=32, minibatch_size=64,
                  update_epochs=2, total_timesteps=384)
def same(a, b):
    # Agents per device differ between the two runs (another vmap width), so float32 sums
    # may run in another order: equal to rounding (tests/conftest.py ACROSS_SHAPES), not
    # bitwise. Integer leaves (keys, counters, episodes) are compared exactly all the same.
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    return len(la) == len(lb) and all(
        np.allclose(np.asarray(x), np.asarray(y), rtol=1e-4, atol=1e-5, equal_nan=True)
        if np.asarray(x).dtype.kind == "f" else np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(la, lb))
same_metrics = same
out = {"devices": jax.device_count()}
"""


def run_with_devices(code: str, devices: int = 4) -> dict:
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}"}
    env["JAX_PLATFORMS"] = "cpu"
    script = PRELUDE + textwrap.dedent(code) + "\nprint('RESULT' + json.dumps(out))\n"
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=800
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = [x for x in proc.stdout.splitlines() if x.startswith("RESULT")][-1]
    return json.loads(line[len("RESULT") :])


def test_sharded_sweep_equals_single_device_agent_by_agent():
    # 3 settings x 2 seeds = 6 agents on 4 devices: padded to 8, padding dropped.
    out = run_with_devices(
        """
        sharded = sweep(SMALL, seeds=2, lr=[1e-4, 3e-4, 1e-3])
        single = sweep(SMALL, seeds=2, lr=[1e-4, 3e-4, 1e-3], mesh=False)
        out["shape"] = list(sharded.metrics.entropy.shape)
        out["metrics_equal"] = same_metrics(sharded.metrics, single.metrics)
        out["state_equal"] = same(sharded.state, single.state)
        """
    )
    assert out["devices"] == 4
    assert out["shape"] == [3, 2, 3]  # padding agents dropped
    assert out["metrics_equal"] and out["state_equal"], out


def test_one_compile_and_each_device_holds_its_shard():
    out = run_with_devices(
        """
        agents = Engine(SMALL)  # default: every device
        keys = jnp.stack([jax.random.PRNGKey(s) for s in range(6)])
        hp = SMALL.traced().batched(lr=jnp.full(6, 3e-4), ent_coef=jnp.full(6, 0.01))
        state, metrics = agents(keys, hp)
        hp2 = hp.batched(lr=jnp.full(6, 1e-3))
        agents(jnp.stack([jax.random.PRNGKey(s) for s in range(6, 12)]), hp2)  # no retrace
        out["traces"] = agents.num_traces
        out["padded"] = agents.padded(6)
        leaves = jax.tree.leaves((state, metrics))
        # Compared as tuples: slicing a PartitionSpec gives a tuple on jax 0.10.
        out["all_sharded"] = all(
            isinstance(x.sharding, NamedSharding) and tuple(x.sharding.spec)[:1] == ("agents",)
            for x in leaves)
        out["shard_rows"] = sorted({s.data.shape[0] for x in leaves for s in x.addressable_shards})
        out["shard_devices"] = len({s.device for s in metrics.entropy.addressable_shards})
        out["stripped"] = list(agents.strip(metrics, 6).entropy.shape)
        """
    )
    assert out["traces"] == 1
    assert out["padded"] == 8
    assert out["all_sharded"]
    assert out["shard_rows"] == [2]  # 8 padded agents / 4 devices; no device holds more
    assert out["shard_devices"] == 4
    assert out["stripped"] == [6, SMALL_UPDATES]


SMALL_UPDATES = 3


def test_checkpointed_sweep_resumes_on_another_device_count(tmp_path):
    # Stop after the first chunk on 4 devices, resume on 1: equal to the uninterrupted sweep.
    run_dir = tmp_path / "sweep"
    out = run_with_devices(
        f"""
        r = sweep(SMALL, seeds=3, lr=[3e-4, 1e-3], run_dir={str(run_dir)!r},
                  checkpoint_every=1, should_stop=lambda: True)
        out["finished"] = r.finished
        """
    )
    assert out["devices"] == 4 and out["finished"] is False
    out = run_with_devices(
        f"""
        resumed = resume_sweep({str(run_dir)!r})
        whole = sweep(SMALL, seeds=3, lr=[3e-4, 1e-3])
        out["finished"] = resumed.finished
        out["equal"] = same(resumed.state, whole.state) and same_metrics(
            resumed.metrics, whole.metrics)
        """,
        devices=1,
    )
    assert out["devices"] == 1 and out["finished"] is True
    assert out["equal"]
