"""The trainer's programs lower for GPU (cuda) and TPU without that hardware (`jax.export`).

What is checked: the programs `make_train`, a sweep (agents vmapped, and in groups), PBT's
generation scan, the continuous (Gaussian) and recurrent (GRU) variants, and the sharded
program (4 forced CPU devices, in a subprocess) export for ``("cuda", "tpu")`` with no custom
call except JAX's platform-neutral sharding markers and those platforms' own QR (the
orthogonal init): nothing CPU-only (LAPACK, CPU-specific kernels) sneaks into them, and the
CPU-only lowering of the PRNG (`unrolled_threefry`) and the CPU compiler options stay out of
other platforms' programs. What is not checked: that
XLA's GPU and TPU compilers accept them, which needs the hardware (docs/benchmarks.md).
"""

import contextlib
import re

import jax
import jax.numpy as jnp
import pytest
from conftest import SMALL, needs_gymnax

from purejaxppo import PPOConfig
from purejaxppo._agents import batched
from purejaxppo._engine import Engine
from purejaxppo._pbt import PBTCarry, check_pbt_args
from purejaxppo._programs import INIT, TRAIN, Generations
from purejaxppo._search import initial_population
from purejaxppo._xla_cpu import UNROLL_BELOW, unrolled_threefry

pytestmark = pytest.mark.timeout(900)

PLATFORMS = ("cuda", "tpu")
#: Custom calls JAX emits for sharding on every platform (shard_map's boundaries).
NEUTRAL = {"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"}
#: The GPU's and TPU's own QR, as jax lowers `jnp.linalg.qr` there (the orthogonal init).
PLATFORM_QR = {"cusolver_geqrf_ffi", "cusolver_orgqr_ffi", "Qr",
               "ProductOfElementaryHouseholderReflectors"}  # fmt: skip
#: The TPU's own kernel that permutes each epoch's packed rows (`_permute`, Pallas).
TPU_KERNEL = {"tpu_custom_call"}


def custom_calls(exported) -> set[str]:
    text = exported.mlir_module()
    return set(re.findall(r"custom_call @([\w.$-]+)", text)) | set(
        re.findall(r'call_target_name = "([^"]+)"', text)
    )


def export(fn, *args):
    # Lowered the way the engine lowers (inside `unrolled_threefry`): the CPU-only PRNG rule
    # must not leak into other platforms' programs.
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)), args)
    with unrolled_threefry():
        return jax.export.export(jax.jit(fn), platforms=PLATFORMS)(*shapes)


def agents(cfg: PPOConfig, n: int):
    keys = jax.random.split(jax.random.PRNGKey(0), n)
    return keys, batched(cfg.traced(), n)


GRU = PPOConfig(env="MemoryChain-bsuite", network="gru", hidden_size=16, conv_channels=(),
                mlp_widths=(16,), num_envs=4, num_steps=8, minibatch_size=16, update_epochs=1,
                total_timesteps=64)  # fmt: skip
PENDULUM = PPOConfig(env="Pendulum-v1", num_envs=4, num_steps=16, minibatch_size=32,
                     update_epochs=1, total_timesteps=128)  # fmt: skip


@pytest.mark.parametrize(
    "name, cfg, n, group",
    [
        ("make_train (one agent)", SMALL, 1, None),
        ("sweep: 8 agents vmapped", SMALL, 8, None),
        ("sweep: 8 agents in groups of 2", SMALL, 8, 2),
        pytest.param("continuous (Gaussian), 4 agents", PENDULUM, 4, None, marks=needs_gymnax),
        pytest.param("recurrent (GRU), 4 agents", GRU, 4, None, marks=needs_gymnax),
    ],
)
def test_the_trainer_lowers_for_gpu_and_tpu_with_no_cpu_only_calls(name, cfg, n, group):
    engine = Engine(cfg, mesh=False)
    exported = export(engine.program(TRAIN, n, group), *agents(cfg, n))
    assert set(exported.platforms) == set(PLATFORMS)
    assert custom_calls(exported) <= NEUTRAL | PLATFORM_QR | TPU_KERNEL, (
        name,
        custom_calls(exported),
    )


def test_pbt_generations_lower_for_gpu_and_tpu():
    ranges = {"lr": (1e-5, 1e-2)}
    step = check_pbt_args(SMALL, 8, 1, "truncation", 0.25, "perturb", (0.8, 1.25), 0.25, 1e6,
                          ranges)  # fmt: skip
    keys, hp, pbt_key = initial_population(SMALL, 8, 0, ranges)
    engine = Engine(SMALL, mesh=False)
    state = jax.eval_shape(engine.program(INIT, 8), keys, hp)
    carry = PBTCarry(pbt_key, jnp.asarray(0, jnp.int32))
    program = engine.program(Generations(1, 2, step, 1), 8)
    exported = export(program, state, hp, carry)
    assert custom_calls(exported) <= NEUTRAL | TPU_KERNEL, custom_calls(exported)


@pytest.mark.skipif(
    jax.__version_info__ >= UNROLL_BELOW, reason="unrolled_threefry is off from jax 0.11"
)
def test_the_cpu_only_prng_rule_is_scoped_to_cpu():
    # This check can fail: lowered for CPU, the program carries jax's rolled threefry loops
    # (while loops) and `unrolled_threefry` removes them; for cuda/tpu the rule is unchanged.
    program = Engine(SMALL, mesh=False).program(INIT, 1)
    shapes = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)), agents(SMALL, 1)
    )

    def loops(platform: str, unrolled: bool) -> int:
        fn = jax.jit(lambda *a: program(*a))  # a new function: no cached lowering
        with unrolled_threefry() if unrolled else contextlib.nullcontext():
            text = jax.export.export(fn, platforms=(platform,))(*shapes).mlir_module()
        return text.count("stablehlo.while")

    assert loops("cpu", False) > loops("cpu", True)
    assert loops("cuda", False) == loops("cuda", True) == loops("cpu", True)


@pytest.mark.subprocess
def test_the_sharded_program_lowers_for_gpu_and_tpu():
    from test_sharding import run_with_devices

    out = run_with_devices(
        """
        import re
        from purejaxppo._engine import Engine
        from purejaxppo._agents import batched
        from purejaxppo._programs import TRAIN
        engine = Engine(SMALL)  # 4 devices: shard_map over the agent axis
        keys = jax.random.split(jax.random.PRNGKey(0), 8)
        hp = batched(SMALL.traced(), 8)
        spec = NamedSharding(engine.mesh, PartitionSpec("agents"))
        shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x),
                                                             sharding=spec), (keys, hp))
        fn = jax.jit(engine.program(TRAIN, 8))
        exported = jax.export.export(fn, platforms=("cuda", "tpu"))(*shapes)
        text = exported.mlir_module()
        out["calls"] = sorted(set(re.findall(r'call_target_name = "([^"]+)"', text))
                              | set(re.findall(r"custom_call @([\\w.$-]+)", text)))
        out["devices"] = exported.nr_devices
        """
    )
    assert out["devices"] == 4
    assert set(out["calls"]) <= NEUTRAL | PLATFORM_QR | TPU_KERNEL, out["calls"]
