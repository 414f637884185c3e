import jax
import pytest


@pytest.fixture
def key():
    return jax.random.PRNGKey(0)


def tree_equal(a, b) -> bool:
    """Exact (bitwise) equality of two pytrees of arrays, NaNs compared equal."""
    import numpy as np

    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    return ta == tb and all(
        np.array_equal(x, y, equal_nan=True) for x, y in zip(la, lb, strict=True)
    )
