"""No batched LAPACK call in any program we build (jaxlib 0.10's deadlock: docs/jax-versions.md).

Our orthogonal initializer must equal jax's, alone and under vmap (the same draw and the same
LAPACK QR: bitwise where measured, compared here to a rounding-level tolerance since these are
different programs), and stay orthogonal; a vmapped QR must run as unbatched LAPACK calls
(``num_batch_dims = "0"``), which never split, in every lowered trainer program. CPU only.
"""

import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import SMALL
from lapack_deadlock import lapack_calls

from purejaxppo import PPOConfig, make_train
from purejaxppo._agents import agent_inputs
from purejaxppo._engine import Engine
from purejaxppo._networks import make_network
from purejaxppo._orthogonal import orthogonal
from purejaxppo._programs import INIT, TRAIN
from purejaxppo.envs import make_env

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu", reason="LAPACK is CPU's")

#: Different programs (jit vs eager, vmapped vs alone): equal bitwise on every machine measured,
#: but only one program and one batch shape guarantee it; a few float32 ulps of these entries.
SAME_QR = dict(rtol=0, atol=1e-6)


@pytest.mark.parametrize("shape", [(4, 64), (64, 64), (64, 300), (300, 64), (1, 16)])
def test_orthogonal_equals_jaxs_and_is_orthogonal(shape):
    n, m = shape
    for seed in range(3):
        key = jax.random.PRNGKey(seed)
        ours = np.asarray(jax.jit(orthogonal, static_argnums=(1, 2))(key, shape, 0.5))
        ref = np.asarray(jax.nn.initializers.orthogonal(0.5)(key, shape, jnp.float32))
        np.testing.assert_allclose(ours, ref, **SAME_QR)  # the same draw, the same LAPACK QR
        gram = ours @ ours.T if n <= m else ours.T @ ours
        np.testing.assert_allclose(gram, 0.25 * np.eye(min(n, m)), rtol=0, atol=2e-6)


def test_vmapped_orthogonal_equals_one_at_a_time():
    keys = jax.random.split(jax.random.PRNGKey(7), 5)
    for shape in [(64, 4), (64, 64), (2, 64)]:
        one = jax.jit(orthogonal, static_argnums=(1, 2))
        alone = [np.asarray(one(k, shape, 1.0)) for k in keys]
        vmapped = jax.jit(jax.vmap(lambda k, s=shape: orthogonal(k, s, 1.0)))(keys)
        np.testing.assert_allclose(np.stack(alone), np.asarray(vmapped), **SAME_QR)
        nested = jax.jit(jax.vmap(jax.vmap(lambda k, s=shape: orthogonal(k, s, 1.0))))
        got = np.asarray(nested(keys.reshape(5, 1, -1)))[:, 0]
        np.testing.assert_allclose(got, np.asarray(vmapped), **SAME_QR)


def batched_lapack_calls(lowered) -> list[str]:
    return lapack_calls(lowered.as_text(), batched_only=True)


@pytest.mark.parametrize(
    "cfg",
    [
        SMALL,
        PPOConfig(env="Snake-v1", network="separate", conv_channels=(), mlp_widths=(64, 64)),
        PPOConfig(env="Minesweeper-v0", network="per_cell", conv_channels=(4,)),
    ],
    ids=["shared", "separate", "per_cell"],
)
def test_vmapped_init_has_no_batched_lapack_call(cfg):
    env = make_env(cfg)
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    init = jax.jit(jax.vmap(lambda k: make_network(cfg, env.obs_shape, env.action_dims, k)))
    lowered = init.lower(keys)
    assert lapack_calls(lowered.as_text()) != []  # the QRs are there, unbatched
    assert batched_lapack_calls(lowered) == []


def test_trainer_programs_have_no_batched_lapack_call():
    keys, hp, _ = agent_inputs(SMALL, {}, [0, 1, 2])
    engine = Engine(SMALL, mesh=False)
    for kind in (INIT, TRAIN):
        lowered = jax.jit(engine.program(kind, 3)).lower(keys, hp)
        assert lapack_calls(lowered.as_text()) != [], kind
        assert batched_lapack_calls(lowered) == [], kind
    user = jax.jit(jax.vmap(make_train(SMALL)))  # a user's own vmap over seeds
    assert batched_lapack_calls(user.lower(jnp.asarray(keys))) == []
    # The pattern does find a batched call where there is one: jax's initializer under vmap.
    ortho = jax.nn.initializers.orthogonal()
    theirs = jax.jit(jax.vmap(lambda k: ortho(k, (8, 8), jnp.float32))).lower(keys)
    assert batched_lapack_calls(theirs) == ["lapack_sgeqrf_ffi", "lapack_sorgqr_ffi"]


@pytest.mark.subprocess
@pytest.mark.timeout(300)
def test_reproducer_finishes_with_our_initializer():
    script = Path(__file__).parent / "lapack_deadlock.py"
    out = subprocess.run(
        [sys.executable, str(script), "--init", "ours", "--calls", "50"],
        capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "batched LAPACK calls in the program: []" in out.stdout
    assert "50 calls in" in out.stdout
