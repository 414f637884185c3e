"""Orthogonal initialisation that is safe under `vmap` on every jaxlib (no batched LAPACK
call on CPU), and the orthogonally initialised Linear of PureJaxRL's networks."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray


def orthogonal(key: PRNGKeyArray, shape: tuple[int, int], scale: float) -> Float[Array, "n m"]:
    """``jax.nn.initializers.orthogonal(scale)(key, shape)``, safe under `vmap`.

    The same draw and the same arithmetic (bitwise equal where measured; tested):
    ``z = normal(key, (max(n, m), min(n, m)))``, Q of its QR (LAPACK) with R's diagonal made
    positive, transposed when ``n < m``. Why not jax's own: under `vmap` over agents its QR
    becomes a *batched* LAPACK call, and jaxlib 0.10's batched CPU kernels can deadlock on
    XLA:CPU's own thread pool (docs/jax-versions.md). Here a vmapped QR runs on CPU as a
    `lax.map` of unbatched calls (`_q_of_qr`), which never split, so on CPU an agent's
    initial weights are the same alone or vmapped with others.
    """
    n, m = shape
    z = jax.random.normal(key, (max(n, m), min(n, m)), jnp.float32)
    q = _q_of_qr(z)
    return jnp.asarray(scale, jnp.float32) * (q.T if n < m else q)


def _qr_q(a: Float[Array, "*b p k"]) -> Float[Array, "*b p k"]:
    """The thin Q of ``a = QR`` (p ≥ k) with R's diagonal made non-negative, as jax's
    orthogonal initializer computes it (a batch of matrices is a batched QR)."""
    q, r = jnp.linalg.qr(a)
    return q * jnp.sign(jnp.diagonal(r, axis1=-2, axis2=-1))[..., None, :]


@jax.custom_batching.custom_vmap
def _q_of_qr(a: Float[Array, "p k"]) -> Float[Array, "p k"]:
    """`_qr_q` of one matrix. Under `vmap`, on CPU a `lax.map` of unbatched LAPACK calls (a
    batched one can deadlock jaxlib 0.10); elsewhere the platform's batched QR."""
    return _qr_q(a)


@_q_of_qr.def_vmap
def _q_of_qr_batched(axis_size: int, in_batched: list[bool], a: Array) -> tuple[Array, bool]:
    (batched,) = in_batched
    if not batched:
        return _q_of_qr(a), False
    one_at_a_time = lambda a: jax.lax.map(_q_of_qr, a)  # noqa: E731
    return jax.lax.platform_dependent(a, cpu=one_at_a_time, default=_qr_q), True


def _orthogonal_linear(d_in: int, d_out, scale: float, key: PRNGKeyArray) -> eqx.nn.Linear:
    """A Linear with orthogonal weights at ``scale`` and zero bias (PureJaxRL's init)."""
    lin = eqx.nn.Linear(d_in, d_out, key=key)
    n_out = 1 if d_out == "scalar" else d_out
    w = orthogonal(key, (n_out, d_in), scale=scale)
    w = w.reshape(lin.weight.shape)
    return eqx.tree_at(lambda m: (m.weight, m.bias), lin, (w, jnp.zeros_like(lin.bias)))
