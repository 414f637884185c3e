"""No batched LAPACK call in any program we build (jaxlib 0.10's deadlock: docs/jax-versions.md).

Our orthogonal initializer is plain array operations; it must equal jax's (LAPACK) one to
float32 rounding and stay orthogonal, and no lowered trainer program may call LAPACK.
"""

import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import SMALL

from purejaxppo import PPOConfig, make_train
from purejaxppo._engine import Engine, agent_inputs
from purejaxppo._networks import make_network, orthogonal
from purejaxppo.envs import make_env

# Custom-call targets in the lowered StableHLO text (a literal prefix: the text is megabytes).
CUSTOM_CALL = re.compile(r"custom_call @(\w+)")


@pytest.mark.parametrize("shape", [(4, 64), (64, 64), (64, 300), (300, 64), (1, 16)])
def test_orthogonal_equals_jaxs_and_is_orthogonal(shape):
    n, m = shape
    for seed in range(3):
        key = jax.random.PRNGKey(seed)
        ours = np.asarray(jax.jit(orthogonal, static_argnums=(1, 2))(key, shape, 0.5))
        ref = np.asarray(jax.nn.initializers.orthogonal(0.5)(key, shape, jnp.float32))
        np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-5)  # LAPACK's to rounding
        gram = ours @ ours.T if n <= m else ours.T @ ours
        np.testing.assert_allclose(gram, 0.25 * np.eye(min(n, m)), rtol=0, atol=2e-6)


def lapack_calls(lowered) -> list[str]:
    targets = {m.group(1) for m in CUSTOM_CALL.finditer(lowered.as_text())}
    return sorted(t for t in targets if "lapack" in t.lower())


@pytest.mark.parametrize(
    "cfg",
    [
        SMALL,
        PPOConfig(env="Snake-v1", network="separate", conv_channels=(), mlp_widths=(64, 64)),
        PPOConfig(env="Minesweeper-v0", network="per_cell", conv_channels=(4,)),
    ],
    ids=["shared", "separate", "per_cell"],
)
def test_vmapped_init_has_no_lapack_call(cfg):
    env = make_env(cfg)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    init = jax.jit(jax.vmap(lambda k: make_network(cfg, env.obs_shape, env.action_dims, k)))
    assert lapack_calls(init.lower(keys)) == []


def test_trainer_programs_have_no_lapack_call():
    keys, hp, _ = agent_inputs(SMALL, {}, [0, 1, 2])
    engine = Engine(SMALL, mesh=False)
    for kind in ("init", "train"):
        lowered = jax.jit(engine.program(kind, 3)).lower(keys, hp)
        assert lapack_calls(lowered) == [], kind
    user = jax.jit(jax.vmap(make_train(SMALL)))  # a user's own vmap over seeds
    assert lapack_calls(user.lower(jnp.asarray(keys))) == []
    # The pattern does find LAPACK where it is: jax's own initializer under vmap.
    ortho = jax.nn.initializers.orthogonal()
    theirs = jax.jit(jax.vmap(lambda k: ortho(k, (8, 8), jnp.float32))).lower(keys)
    assert lapack_calls(theirs) != []


@pytest.mark.subprocess
@pytest.mark.timeout(300)
def test_reproducer_finishes_with_our_initializer():
    script = Path(__file__).parent / "lapack_deadlock.py"
    out = subprocess.run(
        [sys.executable, str(script), "--init", "ours", "--calls", "50"],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "LAPACK calls in the program: []" in out.stdout
    assert "50 calls in" in out.stdout
