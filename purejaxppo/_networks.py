"""The actor-critic networks and the masked categorical policy.

Every network implements `AbstractActorCritic`: one observation in, ``(logits, value)`` out.
Every layer takes *one* example; callers batch with `jax.vmap` (over envs, minibatch rows
and, in sweeps, agents). `NETWORKS` maps `PPOConfig.network` names to the classes.
"""

from __future__ import annotations

import abc
import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, PRNGKeyArray

from ._conv import Conv2d
from ._orthogonal import _orthogonal_linear, orthogonal


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


#: `PPOConfig.activation` names → functions (the one list of choices).
ACTIVATIONS = {"relu": jax.nn.relu, "tanh": jnp.tanh}


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


def _action_dims(num_actions: int | tuple[int, ...]) -> tuple[int, ...]:
    """``A`` → ``(A,)`` (one categorical); a tuple lists the sizes of factorised categoricals.

    The network outputs ``sum(dims)`` logits either way; the policy functions below read them
    with these dims.
    """
    if isinstance(num_actions, (tuple, list)):
        return tuple(int(d) for d in num_actions)
    return (int(num_actions),)


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
#: the TPU's per-iteration cost (figures: docs/experiments/craftax-ablation.md, tenth session).
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


def _head_mlp(
    d_in: int, widths: tuple[int, ...], key: PRNGKeyArray, gain: float
) -> tuple[eqx.nn.Linear, ...]:
    """A head's hidden layers: orthogonal at ``gain``, zero bias (``ppo_rnn.py``'s at 2.0)."""
    keys = jax.random.split(key, len(widths))
    ins = (d_in, *widths[:-1])
    pairs = zip(ins, widths, list(keys), strict=True)
    return tuple(_orthogonal_linear(i, o, gain, k) for i, o, k in pairs)


def is_recurrent(net: AbstractActorCritic) -> bool:
    """Whether ``net`` carries a hidden state (see `AbstractRecurrentActorCritic`)."""
    return isinstance(net, AbstractRecurrentActorCritic)


def _with_log_std(out: Float[Array, " P"], log_std: Array | None) -> Float[Array, " P"]:
    """A Gaussian head's ``mean | log_std`` when the log-std is a parameter (else as is)."""
    return out if log_std is None else jnp.concatenate([out, log_std])


#: `PPOConfig.network` names → network classes (the one list of choices).
NETWORKS: dict[str, type[AbstractActorCritic]] = {
    "shared": SharedActorCritic,
    "separate": SeparateActorCritic,
    "per_cell": PerCellActorCritic,
    "gru": GRUActorCritic,
}


def make_network(cfg, obs_shape: tuple[int, ...], action, key: PRNGKeyArray) -> AbstractActorCritic:
    """The network a config asks for (``cfg.network``).

    ``action``: the policy's distribution (`_distributions`), or categorical factor sizes.
    A Gaussian's network outputs the ``k`` means and, with ``cfg.state_dependent_std``, ``k``
    log-stds (their head's bias starts at ``cfg.log_std_init``); otherwise the log-std is a
    learned parameter per dimension, starting at ``cfg.log_std_init``.
    """
    size = getattr(action, "size", None)  # a Gaussian's action dimensions
    dims = getattr(action, "dims", action)
    cls = NETWORKS[cfg.network]
    extra = {}
    if size is not None:
        if cls is PerCellActorCritic:
            raise ValueError(
                f"PPOConfig.network={cfg.network!r} is invalid: it cannot serve continuous "
                "actions; use network='shared', 'separate' or 'gru'."
            )
        init = jnp.full(size, cfg.log_std_init, jnp.float32)
        if not cfg.state_dependent_std:
            extra["log_std"] = init
    if cls is GRUActorCritic:
        extra["hidden_size"] = cfg.hidden_size
        extra["head_widths"] = cfg.head_widths
        extra["head_init_gain"] = cfg.head_init_gain
        extra["gru_init"] = cfg.gru_init
    outputs = dims if size is None else (2 * size if cfg.state_dependent_std else size)
    net = cls(
        obs_shape, outputs, cfg.conv_channels, cfg.mlp_widths, activation=cfg.activation,
        key=key, **extra,
    )  # fmt: skip
    if size is not None and cfg.state_dependent_std:  # the log-std half starts at the init
        return eqx.tree_at(_last_bias, net, _last_bias(net).at[size:].add(init))
    return net


def _last_bias(net: AbstractActorCritic) -> Array:
    """The bias of the policy's output layer."""
    head = net.actor[-1] if isinstance(net, SeparateActorCritic) else net.policy_head
    return head.bias


def network_shapes(cfg, obs_shape: tuple[int, ...], action):
    """Shapes and dtypes of ``make_network``'s parameters (nothing is computed)."""
    return jax.eval_shape(lambda: make_network(cfg, obs_shape, action, jax.random.PRNGKey(0)))
