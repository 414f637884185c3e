"""The scoped unrolled-threefry lowering: same bits, no rolled loop, default restored."""

import jax
import numpy as np
import pytest

from purejaxppo._xla_cpu import UNROLL_BELOW, unrolled_threefry

OLD_JAX = jax.__version_info__ < UNROLL_BELOW  # where the unrolled lowering applies


def draw():
    """A new function each time: jax caches lowerings per traced function."""
    return jax.jit(lambda key: (jax.random.uniform(key, (7,)), jax.random.split(key, 3)))


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="a CPU-only lowering choice")
@pytest.mark.skipif(not OLD_JAX, reason="off from jax 0.11: see the next test")
def test_unrolled_threefry_gives_the_same_bits_without_a_loop_and_restores_the_default():
    from jax._src.interpreters import mlir
    from jax.extend.random import threefry2x32_p

    default_rule = mlir._platform_specific_lowerings["cpu"][threefry2x32_p]
    key = jax.random.PRNGKey(3)
    rolled_text = draw().lower(key).as_text()
    with unrolled_threefry():
        unrolled_text = draw().lower(key).as_text()
        inside = draw()(key)
    outside = draw()(key)
    assert "stablehlo.while" in rolled_text  # jax's CPU default: a 5-iteration loop
    assert "stablehlo.while" not in unrolled_text
    for a, b in zip(jax.tree.leaves(inside), jax.tree.leaves(outside), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert mlir._platform_specific_lowerings["cpu"][threefry2x32_p] is default_rule
    assert "stablehlo.while" in draw().lower(key).as_text()


@pytest.mark.skipif(OLD_JAX, reason="applies from jax 0.11 (UNROLL_BELOW)")
def test_from_jax_0_11_the_cpu_lowering_is_left_as_jax_has_it():
    # jax 0.11.2's XLA:CPU compiled the unrolled form for minutes: the block does nothing.
    key = jax.random.PRNGKey(3)
    with unrolled_threefry():
        text = draw().lower(key).as_text()
    assert "stablehlo.while" in text
