"""The feedforward networks: the reference's shared torso, PureJaxRL's separate actor and
critic, and the fully convolutional per-cell policy."""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Float, PRNGKeyArray

from .._conv import Conv2d
from .._orthogonal import _orthogonal_linear, orthogonal
from ._base import (
    ACTIVATIONS,
    AbstractActorCritic,
    _action_dims,
    _linear,
    _run_torso,
    _torso,
    _with_log_std,
)


class SharedActorCritic(AbstractActorCritic):
    """Shared torso (convs for grids, then an MLP), a scalar value head and a policy head.

    The default for Maze is the reference's network: Conv(3→1, 3×3) → ReLU → flatten(64) →
    Linear(64→64) → ReLU, value Linear(64→1), policy Linear(64→4) with an orthogonal
    initialisation at scale 0.01.
    """

    convs: tuple[Conv2d, ...]
    mlp: tuple[eqx.nn.Linear, ...]
    value_head: eqx.nn.Linear
    policy_head: eqx.nn.Linear
    activation: str = eqx.field(static=True, default="relu")
    action_dims: tuple[int, ...] = eqx.field(static=True, default=(4,))  # see `_action_dims`
    log_std: Float[Array, " k"] | None = None  # a Gaussian policy's learned log-std

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        num_actions: int | tuple[int, ...],
        conv_channels: tuple[int, ...] = (1,),
        mlp_widths: tuple[int, ...] = (64,),
        *,
        activation: str = "relu",
        log_std: Float[Array, " k"] | None = None,
        key: PRNGKeyArray,
    ):
        self.activation = activation
        self.action_dims = _action_dims(num_actions)
        self.log_std = log_std
        num_actions = sum(self.action_dims)
        keys = iter(jax.random.split(key, len(conv_channels) + len(mlp_widths) + 3))
        self.convs, self.mlp, width = _torso(obs_shape, conv_channels, mlp_widths, keys)
        self.value_head = eqx.nn.Linear(width, "scalar", key=next(keys))
        head = eqx.nn.Linear(width, num_actions, key=next(keys))
        w = orthogonal(next(keys), (num_actions, width), scale=0.01)
        # Zero bias: the initial policy is (nearly) uniform over legal moves.
        self.policy_head = eqx.tree_at(
            lambda lin: (lin.weight, lin.bias), head, (w, jnp.zeros(num_actions))
        )

    def __call__(self, obs: Array) -> tuple[Float[Array, " A"], Float[Array, ""]]:
        x = _run_torso(self.convs, self.mlp, ACTIVATIONS[self.activation], obs)
        return _with_log_std(self.policy_head(x), self.log_std), self.value_head(x)


class PerCellActorCritic(AbstractActorCritic):
    """A fully convolutional policy: one logit per grid cell, for "click a cell" actions.

    For envs whose action is a cell of the observed grid (Minesweeper: the joint (row, col)
    action over the H×W board). The torso is 3×3 convolutions with zero padding, so every
    layer keeps the H×W geometry; a 1×1 convolution then gives each cell its logit, and the
    H·W logits are read row-major, the joint action's order. The same weights score every
    cell, so a rule such as "a cell next to a revealed 0 is safe" is learned once for the
    whole board. ``SharedActorCritic`` maps a flattened board to the logits through dense layers and
    would have to learn it once per cell (docs/experiments/jumanji-beat-random.md). The value
    is an MLP
    (``mlp_widths``) on the flattened features.

    The weights live in `eqx.nn.Conv2d` modules, but the forward pass is im2col: the nine
    shifted copies of the zero-padded (H, W, C) input are concatenated to (H, W, 9·C) and
    multiplied by the kernel as one matrix (`_same_conv3x3`; tested equal to the modules'
    own `lax.conv`). Why: in our program every convolution runs inside a `lax.scan`
    (rollout steps, epochs, minibatches), where XLA:CPU's convolution is far slower than at
    the top level of a jit, and under `vmap` over agents it becomes a grouped convolution that
    scales badly; im2col is a plain GEMM either way (figures: docs/benchmarks.md).
    """

    convs: tuple[eqx.nn.Conv2d, ...]
    cell_logit: eqx.nn.Linear  # the 1×1 convolution: features of a cell → its logit
    mlp: tuple[eqx.nn.Linear, ...]
    value_head: eqx.nn.Linear
    activation: str = eqx.field(static=True, default="relu")
    action_dims: tuple[int, ...] = eqx.field(static=True, default=(1,))

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        num_actions: int | tuple[int, ...],
        conv_channels: tuple[int, ...] = (32, 32),
        mlp_widths: tuple[int, ...] = (64,),
        *,
        activation: str = "relu",
        key: PRNGKeyArray,
    ):
        dims = _action_dims(num_actions)
        if len(obs_shape) != 3 or not conv_channels or dims != (obs_shape[1] * obs_shape[2],):
            raise ValueError(
                f"PPOConfig.network='per_cell' needs a grid observation (C, H, W), at least one "
                f"conv channel, and one categorical over the H·W cells; got observation "
                f"{obs_shape}, conv_channels={conv_channels!r}, actions {dims}. Use "
                f"network='shared' for this env."
            )
        self.activation = activation
        self.action_dims = dims
        keys = iter(jax.random.split(key, len(conv_channels) + len(mlp_widths) + 3))
        c, h, w = obs_shape
        convs = []
        for out in conv_channels:
            convs.append(eqx.nn.Conv2d(c, out, 3, padding=1, key=next(keys)))
            c = out
        self.convs = tuple(convs)
        # Orthogonal at 0.01, zero bias: the initial policy is (nearly) uniform over legal cells.
        w_cell = orthogonal(next(keys), (1, c), scale=0.01)
        cell = eqx.nn.Linear(c, "scalar", key=next(keys))
        self.cell_logit = eqx.tree_at(lambda m: (m.weight, m.bias), cell, (w_cell, jnp.zeros(1)))
        mlp, width = [], c * h * w
        for out in mlp_widths:
            mlp.append(eqx.nn.Linear(width, out, key=next(keys)))
            width = out
        self.mlp = tuple(mlp)
        self.value_head = eqx.nn.Linear(width, "scalar", key=next(keys))

    def __call__(self, obs: Array) -> tuple[Float[Array, " A"], Float[Array, ""]]:
        act = ACTIVATIONS[self.activation]
        x = jnp.moveaxis(obs.astype(jnp.float32), 0, -1)  # (H, W, C): channels last
        for conv in self.convs:
            x = act(_same_conv3x3(conv, x))
        # (H, W, C) → (H·W, C) rows, one per cell in row-major order, each scored alike.
        cells = x.reshape(-1, x.shape[-1])
        logits = cells @ self.cell_logit.weight[0] + self.cell_logit.bias[0]
        v = jnp.moveaxis(x, -1, 0).reshape(-1)  # (C, H, W) order, as with lax.conv
        for lin in self.mlp:
            v = act(lin(v))
        return logits, self.value_head(v)


def _same_conv3x3(conv: eqx.nn.Conv2d, x: Float[Array, "H W C"]) -> Float[Array, "H W O"]:
    """``conv`` (3×3, padding 1, stride 1) applied to a channels-last ``x``, as im2col.

    Equal to ``conv(x)`` in (C, H, W) layout (tested); see `PerCellActorCritic` for why.
    """
    h, w, c = x.shape
    xp = jnp.pad(x, ((1, 1), (1, 1), (0, 0)))
    # cols[y, x, (3i + j)·C + c] = xp[y + i, x + j, c]: lax.conv's cross-correlation order.
    cols = jnp.concatenate([xp[i : i + h, j : j + w] for i in range(3) for j in range(3)], -1)
    kernel = jnp.transpose(conv.weight, (0, 2, 3, 1)).reshape(conv.weight.shape[0], 9 * c)
    return cols @ kernel.T + conv.bias.reshape(-1)


class SeparateActorCritic(AbstractActorCritic):
    """PureJaxRL's network: separate actor and critic MLPs on the flattened observation.

    Hidden layers (``mlp_widths``): orthogonal init at sqrt(2), zero bias; policy output at
    0.01; value output at 1.0. No convolutions: ``conv_channels`` is not used.
    """

    actor: tuple[eqx.nn.Linear, ...]
    critic: tuple[eqx.nn.Linear, ...]
    activation: str = eqx.field(static=True)
    action_dims: tuple[int, ...] = eqx.field(static=True)
    log_std: Float[Array, " k"] | None = None  # a Gaussian policy's learned log-std

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        num_actions: int | tuple[int, ...],
        conv_channels: tuple[int, ...] = (),
        mlp_widths: tuple[int, ...] = (64, 64),
        *,
        activation: str = "tanh",
        log_std: Float[Array, " k"] | None = None,
        key: PRNGKeyArray,
    ):
        del conv_channels  # one signature for every network (see `make_network`)
        self.log_std = log_std
        widths = mlp_widths
        actor_key, critic_key = jax.random.split(key)
        self.action_dims = _action_dims(num_actions)
        num_actions = sum(self.action_dims)

        def mlp(key, out, out_scale):
            keys = jax.random.split(key, len(widths) + 1)
            layers, width = [], math.prod(obs_shape)
            for k, w in zip(keys, widths, strict=False):
                layers.append(_orthogonal_linear(width, w, math.sqrt(2.0), k))
                width = w
            layers.append(_orthogonal_linear(width, out, out_scale, keys[-1]))
            return tuple(layers)

        self.actor = mlp(actor_key, num_actions, 0.01)
        self.critic = mlp(critic_key, "scalar", 1.0)
        self.activation = activation

    def __call__(self, obs: Array) -> tuple[Float[Array, " A"], Float[Array, ""]]:
        x = obs.astype(jnp.float32).reshape(-1)
        act = ACTIVATIONS[self.activation]

        def run(layers):
            h = x
            for lin in layers[:-1]:
                h = act(_linear(lin, h))
            return layers[-1](h)

        return _with_log_std(run(self.actor), self.log_std), run(self.critic)
