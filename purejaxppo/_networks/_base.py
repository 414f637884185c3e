"""What every network shares: the `AbstractActorCritic` interface, the torso (3×3
convolutions for grids, then an MLP), the activations, and the heads' building blocks."""

from __future__ import annotations

import abc
import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from .._conv import Conv2d
from .._orthogonal import _orthogonal_linear


class AbstractActorCritic(eqx.Module):
    """What the trainer, `evaluate` and `Policy` need of a network.

    ``net(obs) -> (logits, value)`` for *one* encoded observation: ``sum(action_dims)``
    logits (one categorical, or factorised categoricals concatenated; see the policy
    functions below) and a scalar value, so the value loss never broadcasts (seed defect 2).
    """

    action_dims: eqx.AbstractVar[tuple[int, ...]]

    @abc.abstractmethod
    def __call__(self, obs: Array) -> tuple[Float[Array, " A"], Float[Array, ""]]:
        raise NotImplementedError


#: `PPOConfig.activation` names → functions (the one list of choices).
ACTIVATIONS = {"relu": jax.nn.relu, "tanh": jnp.tanh}


def _torso(obs_shape, conv_channels, mlp_widths, keys) -> tuple[tuple, tuple, int]:
    """3×3 valid convolutions (grids only), then Linear layers: (convs, mlp, output width).

    Draws one key from ``keys`` per layer, convolutions first.
    """
    convs = []
    if len(obs_shape) == 3:  # (C, H, W) grid
        c, h, w = obs_shape
        for out in conv_channels:
            convs.append(Conv2d(c, out, 3, key=next(keys)))
            c, h, w = out, h - 2, w - 2
            if h < 1 or w < 1:
                raise ValueError(
                    f"PPOConfig.conv_channels={conv_channels!r}: too many 3×3 convolutions "
                    f"for an observation of shape {obs_shape}."
                )
        width = c * h * w
    else:
        width = math.prod(obs_shape)
    mlp = []
    for out in mlp_widths:
        mlp.append(eqx.nn.Linear(width, out, key=next(keys)))
        width = out
    return tuple(convs), tuple(mlp), width


def _run_torso(convs, mlp, act, obs: Array) -> Float[Array, " W"]:
    x = obs.astype(jnp.float32)
    for conv in convs:
        x = act(conv(x))
    x = x.reshape(-1)
    for lin in mlp:
        x = act(lin(x))
    return x


#: A Linear layer on at most this many inputs runs as a sum of broadcast products, not as a
#: matrix product (`_linear`).
NARROW_INPUT = 8


def _linear(lin: eqx.nn.Linear, x: Float[Array, " I"]) -> Array:
    """``lin(x)``; for a narrow input (a low-dimensional observation, e.g. Pendulum's 3
    floats), as ``sum_k W[:, k] x[k] + b``: the same maths, but XLA:CPU then emits one small
    fused loop forward and a reduction backward, where a GEMM call on a 3-wide operand cost
    ~40–50 µs each way per minibatch (docs/benchmarks.md)."""
    if x.shape[-1] > NARROW_INPUT or lin.out_features == "scalar":
        return lin(x)
    y = lin.weight[:, 0] * x[0]
    for k in range(1, x.shape[-1]):
        y = y + lin.weight[:, k] * x[k]
    return y if lin.bias is None else y + lin.bias


def _action_dims(num_actions: int | tuple[int, ...]) -> tuple[int, ...]:
    """``A`` → ``(A,)`` (one categorical); a tuple lists the sizes of factorised categoricals.

    The network outputs ``sum(dims)`` logits either way; the policy functions below read them
    with these dims.
    """
    if isinstance(num_actions, (tuple, list)):
        return tuple(int(d) for d in num_actions)
    return (int(num_actions),)


def _with_log_std(out: Float[Array, " P"], log_std: Array | None) -> Float[Array, " P"]:
    """A Gaussian head's ``mean | log_std`` when the log-std is a parameter (else as is)."""
    return out if log_std is None else jnp.concatenate([out, log_std])


def _head_mlp(
    d_in: int, widths: tuple[int, ...], key: PRNGKeyArray, gain: float
) -> tuple[eqx.nn.Linear, ...]:
    """A head's hidden layers: orthogonal at ``gain``, zero bias (``ppo_rnn.py``'s at 2.0)."""
    keys = jax.random.split(key, len(widths))
    ins = (d_in, *widths[:-1])
    pairs = zip(ins, widths, list(keys), strict=True)
    return tuple(_orthogonal_linear(i, o, gain, k) for i, o, k in pairs)
