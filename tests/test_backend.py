"""The backend choices (`purejaxppo._backend`): each accelerator path computes what the CPU
path computes, and each platform's program gets its own path.

The accelerator paths cannot run here (no accelerator in CI), so they are run on the CPU by
choosing them explicitly, and compared with the CPU paths; which path a platform's program
holds is checked on programs exported for that platform (`jax.export`).
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import needs_gymnax

from purejaxppo import PPOConfig, _conv, _permute, _ppo, make_train
from purejaxppo._agents import batched
from purejaxppo._backend import by_platform
from purejaxppo._conv import _toeplitz_by_contraction, _toeplitz_by_gather
from purejaxppo._distributions import _factor_view, masked_log_probs, take
from purejaxppo._engine import Engine
from purejaxppo._packing import pack_rows, unpack_rows
from purejaxppo._permute import permute_rows
from purejaxppo._programs import TRAIN


def bits(x) -> np.ndarray:
    # Contiguous first: an array fetched from a TPU can come back with strides numpy's view refuses.
    return np.ascontiguousarray(np.asarray(x)).view(np.uint8)


def test_packed_rows_unpack_bit_for_bit_in_any_row_order():
    k = jax.random.split(jax.random.PRNGKey(0), 5)
    tree = {
        "f32": jnp.array([np.nan, -0.0, np.inf, 1.5, -2.0, 3e-39, 7.0], jnp.float32),
        "obs": jax.random.randint(k[0], (7, 3, 10, 10), 0, 256).astype(jnp.uint8),
        "odd_u8": jax.random.randint(k[1], (7, 5), 0, 256).astype(jnp.uint8),  # pads a word
        "mask": jax.random.uniform(k[2], (7, 3)) > 0.5,
        "i32": jax.random.randint(k[3], (7, 2), -(2**31), 2**31 - 1),
        "bf16": jax.random.normal(k[4], (7, 3)).astype(jnp.bfloat16),
        "none": None,  # absent fields stay absent
    }
    words, layout = pack_rows(tree)
    assert words.dtype == jnp.uint32 and words.shape == (7, layout.words)
    # 1 + 75 + 2 + 1 + 2 + 2 words: small dtypes share words, leaf by leaf
    assert layout.words == 83
    order = np.array([3, 1, 0, 6, 5, 4, 2])
    for rows, out in (
        (np.arange(7), unpack_rows(words, layout)),
        (order, unpack_rows(words[order], layout)),
    ):
        assert out["none"] is None
        for name, x in tree.items():
            if x is not None:
                assert out[name].dtype == x.dtype and out[name].shape == x.shape, name
                np.testing.assert_array_equal(bits(out[name]), bits(np.asarray(x)[rows]), name)


def test_action_log_prob_is_the_indexed_one_exactly():
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(1), 3)
    mask = jax.random.uniform(k1, (500, 7)) > 0.3
    lp = masked_log_probs(jax.random.normal(k2, (500, 7)), mask)
    a = jax.random.randint(k3, (500,), 0, 7)
    np.testing.assert_array_equal(take(lp, a), jnp.take_along_axis(lp, a[:, None], -1)[:, 0])
    dims = (3, 4)  # factorised: the sum of each factor's log-prob
    lp = masked_log_probs(jax.random.normal(k2, (500, 7)), jnp.ones((500, 7), bool), dims)
    a = jnp.stack([a % 3, a % 4], -1)
    want = jnp.take_along_axis(_factor_view(lp, dims), a[..., None], -1)[..., 0].sum(-1)
    np.testing.assert_array_equal(take(lp, a, dims), want)


def test_the_convolution_matrix_by_contraction_is_the_gathered_one():
    w = jax.random.normal(jax.random.PRNGKey(2), (6, 2, 3, 3, 3))  # 6 agents' kernels
    gathered = jax.vmap(lambda w: _toeplitz_by_gather(w, (10, 10)))(w)
    contracted = jax.vmap(lambda w: _toeplitz_by_contraction(w, (10, 10)))(w)
    assert gathered.shape == (6, 300, 2 * 64)
    np.testing.assert_array_equal(contracted, gathered)  # each entry a tap times 1, plus zeros

    def loss(w, build):
        return jnp.sum(jnp.sin(build(w, (10, 10))))

    np.testing.assert_allclose(
        jax.grad(loss)(w[0], _toeplitz_by_contraction),
        jax.grad(loss)(w[0], _toeplitz_by_gather),
        rtol=1e-5,
        atol=1e-6,
    )


def accelerator_path(monkeypatch):
    """Run the accelerators' choices on this CPU."""

    def choose(cpu, accelerator, *args):
        return accelerator(*args)

    monkeypatch.setattr(_ppo, "by_platform", choose)
    monkeypatch.setattr(_conv, "by_platform", choose)


def cartpole(**kw):
    return PPOConfig(env="CartPole-v1", num_envs=4, num_steps=32, minibatch_size=32,
                     update_epochs=2, total_timesteps=3 * 128, **kw)  # fmt: skip


@pytest.mark.parametrize(
    "cfg",
    [
        pytest.param(
            PPOConfig(
                num_envs=4,
                num_steps=64,
                minibatch_size=64,
                update_epochs=2,
                total_timesteps=3 * 256,
            ),
            id="maze",
        ),  # fmt: skip
        # a longer check each: the slow tier keeps the fast one short
        pytest.param(cartpole(), id="cartpole", marks=[needs_gymnax, pytest.mark.slow]),
        pytest.param(
            cartpole(network="gru", hidden_size=8, conv_channels=(), sequence_length=8),
            id="gru-sequences",
            marks=[needs_gymnax, pytest.mark.slow],
        ),
    ],
)
def test_the_accelerator_path_trains_what_the_cpu_path_trains(cfg, monkeypatch):
    """Packed rows permuted once per epoch (and the contraction-built convolution) against
    a gather per field per minibatch: the same rows in the same order, so the same update,
    to float rounding (two programs; on the project's CPUs bitwise)."""
    from purejaxppo._engine import _shared

    key = jax.random.PRNGKey(3)
    monkeypatch.setattr(_shared, "_ENGINES", {})
    cpu_state, cpu_metrics = make_train(cfg)(key)
    accelerator_path(monkeypatch)
    monkeypatch.setattr(_shared, "_ENGINES", {})
    acc_state, acc_metrics = make_train(cfg)(key)
    for a, b in zip(
        jax.tree.leaves(acc_state.params), jax.tree.leaves(cpu_state.params), strict=True
    ):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for name in ("policy_loss", "value_loss", "entropy", "approx_kl", "grad_norm"):
        np.testing.assert_allclose(
            getattr(acc_metrics, name), getattr(cpu_metrics, name), rtol=1e-4, atol=1e-6
        )
    # the first rollout, before any learning, is the same program on the same parameters
    assert int(acc_metrics.episodes[0]) == int(cpu_metrics.episodes[0])


def test_each_platform_program_holds_its_own_branch():
    def f(x):
        return by_platform(lambda x: x + 1.0, lambda x: x * 3.0, x)

    assert float(jax.jit(f)(2.0)) == (3.0 if jax.default_backend() == "cpu" else 6.0)
    x = jax.ShapeDtypeStruct((), jnp.float32)
    for platforms, op, other in ((("cpu",), "add", "multiply"), (("tpu",), "multiply", "add")):
        text = jax.export.export(jax.jit(f), platforms=platforms)(x).mlir_module()
        assert f"stablehlo.{op}" in text and f"stablehlo.{other}" not in text, platforms


def per_agent_gathers(cfg: PPOConfig, platform: str) -> list[str]:
    """The name scopes of the gathers whose indices differ per agent (``operand_batching_dims``)
    in the 8-agent training program exported for ``platform``."""
    engine = Engine(cfg, mesh=False)
    args = (jax.random.split(jax.random.PRNGKey(0), 8), batched(cfg.traced(), 8))
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)), args)
    exported = jax.export.export(jax.jit(engine.program(TRAIN, 8)), platforms=(platform,))
    text = exported(*shapes).mlir_module()
    locations = dict(re.findall(r"^(#loc\d+) = (.*)$", text, re.M))
    return [
        locations.get(re.findall(r"loc\((#loc\d+)\)", line)[-1], "")
        for line in text.splitlines()
        if '"stablehlo.gather"' in line and "operand_batching_dims" in line
    ]


def test_on_a_tpu_no_gather_has_per_agent_indices():
    """On a TPU a gather with per-agent indices costs ~13 ns per index (docs/benchmarks.md,
    "On a TPU"); the maze program has none: each epoch's packed rows are permuted by the
    `_permute` kernel. The CPU's program gathers each field per minibatch, and in the env
    and the network."""
    cfg = PPOConfig(num_envs=4, num_steps=32, minibatch_size=32, update_epochs=2,
                    total_timesteps=256)  # fmt: skip
    assert per_agent_gathers(cfg, "tpu") == []
    assert len(per_agent_gathers(cfg, "cpu")) > 5


def test_the_tpu_program_permutes_rows_with_the_kernel():
    cfg = PPOConfig(num_envs=4, num_steps=32, minibatch_size=32, update_epochs=2,
                    total_timesteps=256)  # fmt: skip
    engine = Engine(cfg, mesh=False)
    args = (jax.random.split(jax.random.PRNGKey(0), 8), batched(cfg.traced(), 8))
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)), args)
    for platform, calls in (("tpu", 1), ("cpu", 0), ("cuda", 0)):
        exported = jax.export.export(jax.jit(engine.program(TRAIN, 8)), platforms=(platform,))
        assert exported(*shapes).mlir_module().count("tpu_custom_call") == calls, platform


@pytest.mark.parametrize("rows,width", [(64, 84), (13, 3), (512, 130)])
def test_the_permutation_kernel_is_the_gather(rows, width):
    """The TPU kernel (run by Pallas's interpreter here) against ``x[perm]``, per agent."""
    x = jax.random.bits(jax.random.PRNGKey(1), (3, rows, width), jnp.uint32)
    keys = jax.random.split(jax.random.PRNGKey(2), 3)
    perm = jax.vmap(lambda k: jax.random.permutation(k, rows))(keys)
    expected = np.stack([np.asarray(x[a])[np.asarray(perm[a])] for a in range(3)])
    np.testing.assert_array_equal(_permute._pallas(x, perm, interpret=True), expected)
    # what the trainer calls, under its vmap over agents (and one agent alone)
    np.testing.assert_array_equal(jax.jit(jax.vmap(permute_rows))(x, perm), expected)
    np.testing.assert_array_equal(permute_rows(x[1], perm[1]), expected[1])
    shared = jax.vmap(permute_rows, in_axes=(None, 0))(x[0], perm)
    np.testing.assert_array_equal(shared, np.asarray(x[0])[np.asarray(perm)])


def tpu_permutation_ops(rows: int, width: int) -> tuple[bool, bool]:
    """(kernel, gather) in `permute_rows` of 2 agents exported for a TPU."""
    words = jax.ShapeDtypeStruct((2, rows, width), jnp.uint32)
    perm = jax.ShapeDtypeStruct((2, rows), jnp.int32)
    exported = jax.export.export(jax.jit(jax.vmap(permute_rows)), platforms=("tpu",))
    text = exported(words, perm).mlir_module()
    return "tpu_custom_call" in text, "stablehlo.gather" in text


def test_rows_too_big_for_vector_memory_take_the_gather():
    assert tpu_permutation_ops(8192, 84) == (True, False)
    assert tpu_permutation_ops(65536, 200) == (False, True)  # 64 MiB per agent
    assert tpu_permutation_ops(18000, 8) == (False, True)  # fits vector memory, not MAX_ROWS


def test_a_chip_with_less_vector_memory_takes_the_gather(monkeypatch):
    monkeypatch.setattr(_permute, "_vmem_capacity", lambda: 16 * 2**20)  # a TPU v4's
    assert tpu_permutation_ops(8192, 84) == (False, True)
    assert tpu_permutation_ops(512, 12) == (True, False)


def test_a_jax_without_pallas_takes_the_gather(monkeypatch):
    monkeypatch.setattr(_permute, "_has_pallas", lambda: False)
    assert tpu_permutation_ops(8192, 84) == (False, True)


def dot_precisions(cfg: PPOConfig) -> set[str]:
    """The precision configs of the dot_generals in one-agent training exported for TPU."""
    engine = Engine(cfg, mesh=False)
    args = (jax.random.split(jax.random.PRNGKey(0), 1), batched(cfg.traced(), 1))
    shapes = jax.tree.map(lambda x: jax.ShapeDtypeStruct(jnp.shape(x), jnp.result_type(x)), args)
    exported = jax.export.export(jax.jit(engine.program(TRAIN, 1)), platforms=("tpu",))
    text = exported(*shapes).mlir_module()
    lines = [line for line in text.splitlines() if "stablehlo.dot_general" in line]
    assert lines
    return {(re.findall(r"precision = \[([^\]]*)\]", line) or ["none"])[0] for line in lines}


def test_matmul_precision_reaches_every_product_of_the_training_program():
    cfg = PPOConfig(num_envs=4, num_steps=32, minibatch_size=32, update_epochs=1,
                    total_timesteps=128, mlp_widths=(16,))  # fmt: skip
    highest = dot_precisions(cfg.replace(matmul_precision="highest"))
    assert highest == {"HIGHEST, HIGHEST"}, highest
    with jax.default_matmul_precision("default"):  # the suite's own is "highest" off the CPU
        default = dot_precisions(cfg)
    # the conv matrix's one-hot contraction is HIGHEST whatever the setting (exactness)
    rest = default - {"HIGHEST, HIGHEST"}  # the network's own products: jax's default
    assert rest and rest <= {"none", "DEFAULT, DEFAULT"}, default
    with pytest.raises(ValueError, match="matmul_precision.*highest"):
        PPOConfig(matmul_precision="float32")
