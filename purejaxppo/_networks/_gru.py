"""The recurrent networks: the `AbstractRecurrentActorCritic` interface and the GRU
(``network="gru"``), whose loss re-runs whole sequences."""

from __future__ import annotations

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, PRNGKeyArray

from .._conv import Conv2d
from .._orthogonal import _orthogonal_linear, orthogonal
from ._base import (
    ACTIVATIONS,
    AbstractActorCritic,
    _action_dims,
    _head_mlp,
    _run_torso,
    _torso,
    _with_log_std,
)


class AbstractRecurrentActorCritic(AbstractActorCritic):
    """A network with memory: ``step(hidden, obs) -> (hidden, (out, value))``.

    The hidden state is one vector per env; it starts at `initial_hidden` and is reset to
    it when an episode ends (the trainer does so after the step that ends the episode, i.e.
    before the step that starts the next one). ``net(obs)`` is refused: without a hidden
    state the output would be that of an episode's first step, silently.
    """

    hidden_size: eqx.AbstractVar[int]

    def initial_hidden(self) -> Float[Array, " H"]:
        return jnp.zeros(self.hidden_size, jnp.float32)

    @abc.abstractmethod
    def step(
        self, hidden: Float[Array, " H"], obs: Array
    ) -> tuple[Float[Array, " H"], tuple[Float[Array, " A"], Float[Array, ""]]]:
        raise NotImplementedError

    def unroll(
        self, hidden: Float[Array, " H"], obs: Array, done: Bool[Array, " T"]
    ) -> tuple[Float[Array, "T A"], Float[Array, " T"]]:
        """``step`` over one env's sequence of T observations from ``hidden``, resetting to
        `initial_hidden` after each step whose ``done`` is set, as the rollout does."""

        def body(h, x):
            o, d = x
            h, out = self.step(h, o)
            return jnp.where(d, self.initial_hidden(), h), out

        return jax.lax.scan(body, hidden, (obs, done))[1]

    def __call__(self, obs: Array) -> tuple[Float[Array, " A"], Float[Array, ""]]:
        raise TypeError(
            f"{type(self).__name__} is recurrent: call net.step(hidden, obs) with hidden = "
            "net.initial_hidden() at an episode's start (or use Policy.step)."
        )


class GRUActorCritic(AbstractRecurrentActorCritic):
    """Encoder → GRU cell → policy and value heads (``network="gru"``).

    The encoder is `SharedActorCritic`'s torso (3×3 convolutions for grids, then
    ``mlp_widths``); its output feeds an `eqx.nn.GRUCell` of ``hidden_size``, whose new
    hidden state feeds a policy head (its output layer orthogonal at 0.01, zero bias: a
    near-uniform first policy) and a scalar value head, each linear or, with
    ``head_widths``, an MLP of its own (PureJaxRL ``ppo_rnn.py``'s). The encoder is
    feedforward, so `unroll` encodes a whole sequence, and computes the input's part of the
    cell's gates, in one batched pass each, and scans only the recurrent part: a minibatch of
    sequences costs T small matmuls, not T encoder passes.
    """

    convs: tuple[Conv2d, ...]
    mlp: tuple[eqx.nn.Linear, ...]
    cell: eqx.nn.GRUCell
    value_head: eqx.nn.Linear
    policy_head: eqx.nn.Linear
    activation: str = eqx.field(static=True, default="relu")
    action_dims: tuple[int, ...] = eqx.field(static=True, default=(4,))
    hidden_size: int = eqx.field(static=True, default=128)
    log_std: Float[Array, " k"] | None = None  # a Gaussian policy's learned log-std
    # Hidden layers of each head (``head_widths``); empty for linear heads, which keeps the
    # parameters' leaves, and so older checkpoints, as they were.
    policy_mlp: tuple[eqx.nn.Linear, ...] = ()
    value_mlp: tuple[eqx.nn.Linear, ...] = ()

    def __init__(
        self,
        obs_shape: tuple[int, ...],
        num_actions: int | tuple[int, ...],
        conv_channels: tuple[int, ...] = (1,),
        mlp_widths: tuple[int, ...] = (64,),
        *,
        hidden_size: int = 128,
        head_widths: tuple[int, ...] = (),
        head_init_gain: float = 2.0,
        gru_init: str = "flax",
        activation: str = "relu",
        log_std: Float[Array, " k"] | None = None,
        key: PRNGKeyArray,
    ):
        self.activation = activation
        self.action_dims = _action_dims(num_actions)
        self.hidden_size = hidden_size
        self.log_std = log_std
        num_actions = sum(self.action_dims)
        keys = iter(jax.random.split(key, len(conv_channels) + len(mlp_widths) + 3))
        self.convs, self.mlp, width = _torso(obs_shape, conv_channels, mlp_widths, keys)
        self.cell = _gru_cell(width, hidden_size, gru_init, next(keys))
        value_key, policy_key = next(keys), next(keys)
        if head_widths:
            value_key1, policy_key1 = (
                jax.random.fold_in(value_key, 1),
                jax.random.fold_in(policy_key, 1),
            )
            self.value_mlp = _head_mlp(hidden_size, head_widths, value_key1, head_init_gain)
            self.policy_mlp = _head_mlp(hidden_size, head_widths, policy_key1, head_init_gain)
        head_in = head_widths[-1] if head_widths else hidden_size
        self.value_head = eqx.nn.Linear(head_in, "scalar", key=value_key)
        self.policy_head = _orthogonal_linear(head_in, num_actions, 0.01, policy_key)

    def encode(self, obs: Array) -> Float[Array, " W"]:
        return _run_torso(self.convs, self.mlp, ACTIVATIONS[self.activation], obs)

    def heads(self, hidden: Float[Array, " H"]) -> tuple[Float[Array, " A"], Float[Array, ""]]:
        act = ACTIVATIONS[self.activation]
        p, v = hidden, hidden
        for lin in self.policy_mlp:
            p = act(lin(p))
        for lin in self.value_mlp:
            v = act(lin(v))
        return _with_log_std(self.policy_head(p), self.log_std), self.value_head(v)

    def step(self, hidden, obs):
        hidden = _gru_update(self.cell, _gru_input_gates(self.cell, self.encode(obs)), hidden)
        return hidden, self.heads(hidden)

    def unroll(self, hidden, obs, done):
        # The input gates of the whole sequence are one batched product, outside the loop;
        # the loop keeps only the recurrent product (`GRU_UNROLL` steps per iteration).
        with jax.named_scope("encoder"):
            gates = jax.vmap(lambda o: _gru_input_gates(self.cell, self.encode(o)))(obs)

        def body(h, gd):
            h = _gru_update(self.cell, gd[0], h)
            return jnp.where(gd[1], self.initial_hidden(), h), h

        with jax.named_scope("gru_loop"):
            _, hs = jax.lax.scan(body, hidden, (gates, done), unroll=GRU_UNROLL)
        with jax.named_scope("heads"):
            return jax.vmap(self.heads)(hs)


#: GRU steps per loop iteration of `GRUActorCritic.unroll` (the loss's sequences). A speed
#: choice, the same values to float rounding: fewer, larger loop iterations for the CPU's and
#: the TPU's per-iteration cost (docs/experiments/craftax-ablation.md, 2026-12-07, c443985).
GRU_UNROLL = 2


def _gru_input_gates(cell: eqx.nn.GRUCell, x: Float[Array, " W"]) -> Float[Array, " G"]:
    """The input's part of the three gates (reset, update, new), bias included."""
    return cell.weight_ih @ x + (0.0 if cell.bias is None else cell.bias)


def _gru_update(
    cell: eqx.nn.GRUCell, input_gates: Float[Array, " G"], hidden: Float[Array, " H"]
) -> Float[Array, " H"]:
    """`eqx.nn.GRUCell`'s update from precomputed input gates (`_gru_input_gates`): the
    same arithmetic as ``cell(x, hidden)``, split so a sequence's input products can be
    batched (tests/test_recurrent.py checks it against the cell)."""
    bias_n = 0.0 if cell.bias_n is None else cell.bias_n
    igates = jnp.split(input_gates, 3)
    hgates = jnp.split(cell.weight_hh @ hidden, 3)
    reset = jax.nn.sigmoid(igates[0] + hgates[0])
    inp = jax.nn.sigmoid(igates[1] + hgates[1])
    new = jnp.tanh(igates[2] + reset * (hgates[2] + bias_n))
    return new + inp * (hidden - new)


def _gru_cell(d_in: int, hidden: int, init: str, key: PRNGKeyArray) -> eqx.nn.GRUCell:
    """An `eqx.nn.GRUCell` with ``PPOConfig.gru_init``'s initialisation.

    "equinox": its own (uniform ±1/sqrt(hidden) everywhere). "flax": flax's ``GRUCell``'s
    defaults, gate by gate (reset, update, new): input kernels lecun-normal (a normal truncated
    at ±2 std, variance 1/fan_in), recurrent kernels orthogonal (gain 1), biases zero. Both
    cells compute the same gates (flax's ``(1-z)·n + z·h`` is equinox's ``n + z·(h-n)``).
    """
    cell = eqx.nn.GRUCell(d_in, hidden, key=key)
    if init == "equinox":
        return cell
    keys = jax.random.split(jax.random.fold_in(key, 1), 6)
    std = (1.0 / d_in) ** 0.5 / 0.87962566103423978  # the truncated normal's std at ±2 is 0.88
    w_ih = jnp.concatenate(
        [jax.random.truncated_normal(k, -2.0, 2.0, (hidden, d_in)) * std for k in keys[:3]]
    )
    w_hh = jnp.concatenate([orthogonal(k, (hidden, hidden), 1.0) for k in keys[3:]])
    return eqx.tree_at(
        lambda c: (c.weight_ih, c.weight_hh, c.bias, c.bias_n),
        cell,
        (w_ih, w_hh, jnp.zeros_like(cell.bias), jnp.zeros_like(cell.bias_n)),
    )


def is_recurrent(net: AbstractActorCritic) -> bool:
    """Whether ``net`` carries a hidden state (see `AbstractRecurrentActorCritic`)."""
    return isinstance(net, AbstractRecurrentActorCritic)
