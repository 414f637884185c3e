"""`purejaxppo.envs._slices.masked_slices`: an env's dynamic slices cut by masks give the
env's own values, bit for bit, and leave no gather under `vmap`."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from purejaxppo.envs._slices import masked_slices


def window(grid, pos):
    """A 3×4 window at ``pos`` (dynamic_slice clamps starts that run off the grid)."""
    return jax.lax.dynamic_slice(grid, pos, (3, 4))


def level(stack, i, pos):
    """One level of a stack of maps, then one cell of it (``x[i]`` and ``x[r, c]``)."""
    plane = stack[i]
    return plane, plane[pos[0], pos[1]]


def in_loops(grid, pos, flag):
    """Slices inside a scan, a cond, a while loop and a nested jit."""

    def body(p, _):
        w = jax.jit(window)(grid, p)
        return p + 1, w.max()  # (a sum's rounding would depend on how XLA fuses it)

    _, sums = jax.lax.scan(body, pos, None, length=5)
    picked = jax.lax.cond(flag, lambda: window(grid, pos), lambda: window(grid, -pos))
    _, last = jax.lax.while_loop(
        lambda c: c[0] < 3, lambda c: (c[0] + 1, window(grid, pos + c[0])), (0, picked)
    )
    return sums, picked, last


def assert_same_bits(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(
            np.asarray(x).view(np.uint8), np.asarray(y).view(np.uint8)
        )  # the bytes: -0.0 and NaN too


def cases():
    """Grids of each dtype, with starts inside, at the edges and off both ends."""
    rng = np.random.default_rng(0)
    ints = rng.integers(-50, 50, (10, 12), dtype=np.int32)
    floats = rng.normal(size=(10, 12)).astype(np.float32)
    floats[2, 3], floats[4, 5], floats[6, 7] = -0.0, np.inf, np.nan
    bools = rng.random((10, 12)) < 0.5
    pos = np.array([[0, 0], [7, 8], [3, 5], [-4, 2], [20, -3], [9, 11]], np.int32)
    return [jnp.asarray(g) for g in (ints, floats, bools)], jnp.asarray(pos)


@pytest.mark.parametrize("dtype_at", [0, 1, 2], ids=["int32", "float32", "bool"])
def test_windows_as_the_env_cuts_them(dtype_at):
    grids, pos = cases()
    grid = grids[dtype_at]
    ours = jax.jit(jax.vmap(masked_slices(window), (None, 0)))(grid, pos)
    own = jax.jit(jax.vmap(window, (None, 0)))(grid, pos)
    assert_same_bits(ours, own)
    # and the windows themselves, read one by one: `lax.dynamic_slice` counts a negative
    # start from the end, then clamps the window onto the grid
    for p, w in zip(np.asarray(pos), np.asarray(ours), strict=True):
        p = np.where(p < 0, p + np.array([10, 12]), p)
        r, c = np.clip(p[0], 0, 10 - 3), np.clip(p[1], 0, 12 - 4)
        np.testing.assert_array_equal(w, np.asarray(grid)[r : r + 3, c : c + 4])


def test_levels_cells_and_loops_alike():
    grids, pos = cases()
    stack = jnp.stack([grids[0], grids[0] * 2, -grids[0]])
    i = jnp.array([0, 2, 1, 5, -1, 2])  # 5 and -1: a level past each end (clamped)
    args = (stack, i, pos)
    assert_same_bits(
        jax.jit(jax.vmap(masked_slices(level), (None, 0, 0)))(*args),
        jax.jit(jax.vmap(level, (None, 0, 0)))(*args),
    )
    flags = jnp.array([True, False, True, False, True, False])
    for grid in grids:
        args = (grid, pos, flags)
        ours = jax.jit(jax.vmap(masked_slices(in_loops), (None, 0, 0)))(*args)
        assert_same_bits(ours, jax.jit(jax.vmap(in_loops, (None, 0, 0)))(*args))


def test_no_gather_left_under_vmap():
    """The point of it: the env's own program gathers, the masked one does not."""
    grids, pos = cases()
    stack = jnp.stack([grids[0]] * 3)
    for fn, args, axes in (
        (window, (grids[0], pos), (None, 0)),
        (level, (stack, pos[:, 0], pos), (None, 0, 0)),
        (in_loops, (grids[1], pos, pos[:, 0] > 0), (None, 0, 0)),
    ):
        assert "gather" in str(jax.make_jaxpr(jax.vmap(fn, axes))(*args))
        assert "gather" not in str(jax.make_jaxpr(jax.vmap(masked_slices(fn), axes))(*args))


def test_a_slice_of_at_least_min_elements():
    """``min_elements=2`` leaves the single cells to the env's own indexed read."""
    grids, pos = cases()
    stack = jnp.stack([grids[0]] * 3)
    masked = jax.vmap(masked_slices(level, 2), (None, 0, 0))
    jaxpr = str(jax.make_jaxpr(masked)(stack, pos[:, 0], pos))
    assert jaxpr.count("gather") == 1  # the cell, not the 10×12 level


def reads(x, i, j):
    """Reads at one index: a point and a row, each of jax's index modes."""
    return (
        x[i, j],
        x[i],
        jnp.take(x, i, axis=0, mode="clip"),
        jnp.take(x, i, axis=0, mode="fill", fill_value=7),
        x.at[i, j].get(mode="promise_in_bounds"),
        x.at[i].get(mode="fill"),  # the dtype's default fill where i is outside
    )


def writes(x, i, j, v):
    """Writes at one index (a point, a row), each combination and mode."""
    return (
        x.at[i, j].set(v),
        x.at[i].set(jnp.full(x.shape[1:], v)),
        x.at[i, j].add(v),
        x.at[i, j].mul(v),
        x.at[i, j].min(v),
        x.at[i].max(v),
        x.at[i, j].set(v, mode="clip"),
        x.at[i, j].set(v, mode="drop"),
    )


@pytest.mark.parametrize("dtype_at", [0, 1, 2], ids=["int32", "float32", "bool"])
def test_points_read_and_written_as_the_env_does(dtype_at):
    """``points=True``: a gather or scatter at one index (in bounds, past either end, and
    negative, which jnp counts from the end) gives the env's own values, with no gather
    or scatter left under `vmap`."""
    grids, pos = cases()
    grid = grids[dtype_at]
    i = jnp.array([0, 9, 3, -4, 20, -30], jnp.int32)
    j = pos[:, 1]
    v = grid[1, 1:7] if grid.dtype != jnp.bool_ else jnp.array([True, False] * 3)
    for fn, args, axes in (
        (reads, (grid, i, j), (None, 0, 0)),
        (writes, (grid, i, j, v), (None, 0, 0, 0)),
    ):
        if grid.dtype == jnp.bool_ and fn is writes:
            args = (grid, i, j, v)
            fn = lambda x, i, j, v: (x.at[i, j].set(v), x.at[i].set(v), x.at[i, j].max(v))  # noqa: E731
        masked = jax.vmap(masked_slices(fn, points=True), axes)
        assert_same_bits(jax.jit(masked)(*args), jax.jit(jax.vmap(fn, axes))(*args))
        jaxpr = str(jax.make_jaxpr(masked)(*args))
        assert "gather" not in jaxpr and "scatter" not in jaxpr


def test_by_platform_each_program_holds_its_own_reads():
    """``by_platform=True``: one trace, each read picked when lowered: the env's own
    indexed read (a gather under `vmap`) in a CPU program, the masks in a TPU program."""
    grids, pos = cases()
    chosen = jax.jit(jax.vmap(masked_slices(window, by_platform=True), (None, 0)))
    assert_same_bits(chosen(grids[0], pos), jax.jit(jax.vmap(window, (None, 0)))(grids[0], pos))
    for platform, gathers in (("cpu", True), ("tpu", False)):
        text = jax.export.export(chosen, platforms=(platform,))(grids[0], pos).mlir_module()
        assert ("stablehlo.gather" in text) == gathers, platform
