"""The frozen, typed PPO configuration.

`PPOConfig` is an Equinox Module, so it is a pytree:

* fields marked ``static=True`` fix shapes or loop lengths and live in the tree structure;
* every other field is a numeric leaf, which `make_train` turns into a traced scalar. A config
  whose leaves carry a leading axis can therefore be passed through `jax.vmap` to train one
  agent per hyperparameter value inside the same XLA program.

Defaults are the reference implementation's hyperparameters (docs/reference.md).
"""

from __future__ import annotations

import copy
import dataclasses
import math
import numbers

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._errors import invalid as _fail
from .envs._options import EnvOptions

#: The keys of a PureJaxRL ``ppo.py`` config that `PPOConfig.from_purejaxrl` translates.
PUREJAXRL_KEYS = (
    "LR", "NUM_ENVS", "NUM_STEPS", "TOTAL_TIMESTEPS", "UPDATE_EPOCHS", "NUM_MINIBATCHES",
    "GAMMA", "GAE_LAMBDA", "CLIP_EPS", "ENT_COEF", "VF_COEF", "MAX_GRAD_NORM", "ACTIVATION",
    "ENV_NAME", "ANNEAL_LR",
)  # fmt: skip


#: Fields that are numeric leaves of the config (traced, vmappable).
TRACED_FIELDS = (
    "lr",
    "adam_eps",
    "gamma",
    "gae_lambda",
    "clip_eps",
    "ent_coef",
    "vf_coef",
    "max_grad_norm",
    "log_std_init",
)

#: Traced fields that only shape the initial state: changing them mid-run (PBT) does nothing.
INIT_ONLY_FIELDS = ("log_std_init",)
#: ``matmul_precision``'s values (jax's names: `jax.default_matmul_precision`).
MATMUL_PRECISIONS = ("default", "high", "highest")
GRU_INITS = ("equinox", "flax")  # PPOConfig.gru_init's choices
#: The recurrent network's initialisation fields: their defaults, and what a run directory
#: written before they changed (2026-12-06) meant by their absence.
GRU_DEFAULTS = {"gru_init": "flax", "head_init_gain": 2.0}
GRU_LEGACY = {"gru_init": "equinox", "head_init_gain": 2**0.5}


class PPOConfig(EnvOptions):
    """PPO hyperparameters and problem definition (frozen; defaults are the reference's).

    Its first fields, the environment and its options, are `purejaxppo.envs.EnvOptions`'s."""

    # ---- static: these fix shapes, loop lengths or the program's structure -----------------
    num_envs: int = eqx.field(default=16, static=True)
    """Environments stepped in parallel per agent."""
    num_steps: int = eqx.field(default=512, static=True)
    """Rollout length per environment per update."""
    total_timesteps: int = eqx.field(default=819_200, static=True)
    """Environment steps per agent; a multiple of ``num_envs * num_steps``."""
    update_epochs: int = eqx.field(default=10, static=True)
    """Passes over each rollout batch."""
    minibatch_size: int = eqx.field(default=1024, static=True)
    """Transitions per gradient step; divides ``num_envs * num_steps``."""
    normalize_advantages: bool = eqx.field(default=False, static=True)
    """Normalise advantages per minibatch (off in the reference)."""
    anneal_lr: bool = eqx.field(default=False, static=True)
    """Anneal the learning rate linearly to 0 over training (off in the reference)."""
    clip_value: bool = eqx.field(default=False, static=True)
    """Clip the value update to ``clip_eps`` around the rollout value (off in the reference)."""
    bootstrap_truncation: bool = eqx.field(default=True, static=True)
    """An episode cut by a time limit: bootstrap its last step from the value of the final
    observation (True, the correct target), or end its return there as a termination does
    (False: what PureJaxRL's scripts do, for side-by-side comparisons)."""
    conv_channels: tuple[int, ...] = eqx.field(default=(1,), static=True)
    """Output channels of each 3×3 valid convolution of the torso (grid observations)."""
    mlp_widths: tuple[int, ...] = eqx.field(default=(64,), static=True)
    """Widths of the MLP layers after the convolutions."""
    network: str = eqx.field(default="shared", static=True)
    """"shared": one torso (convs, then MLP) under a value and a policy head (the reference's);
    "separate": separate actor and critic MLPs with orthogonal init (PureJaxRL's);
    "per_cell": "same"-padded convs and one logit per grid cell, for envs whose action is a
    cell of the observed grid (Minesweeper); "gru": the shared torso, then a GRU cell of
    ``hidden_size``, then the heads: a recurrent policy for partially observed tasks (its
    minibatches are env sequences, so ``minibatch_size`` is a multiple of ``num_steps``, or
    of ``sequence_length``)."""
    hidden_size: int = eqx.field(default=128, static=True)
    """For ``network="gru"``: the size of the GRU's hidden state."""
    head_widths: tuple[int, ...] = eqx.field(default=(), static=True)
    """For ``network="gru"``: hidden layers of each head between the GRU and its output (the
    policy and the value head each get their own, orthogonal at ``head_init_gain``). ``()``:
    linear heads; ``(128,)``: PureJaxRL ``ppo_rnn.py``'s network."""
    head_init_gain: float = eqx.field(default=2.0, static=True)
    """For ``network="gru"`` with ``head_widths``: the orthogonal init's gain of those hidden
    layers. 2.0: the heads of PureJaxRL's and Craftax_Baselines' ``ppo_rnn.py`` (it learns
    more on Craftax-Classic than sqrt 2, PureJaxRL ``ppo.py``'s hidden layers' gain and this
    field's default before 2026-12-06: docs/experiments/craftax-ablation.md)."""
    gru_init: str = eqx.field(default="flax", static=True)
    """For ``network="gru"``: the GRU cell's initialisation. "flax": flax's ``GRUCell``'s, as
    PureJaxRL's and Craftax_Baselines' ``ppo_rnn.py`` get it (input kernels lecun-normal,
    recurrent kernels orthogonal, biases zero), which learns more on Craftax-Classic
    (docs/experiments/craftax-ablation.md); "equinox": `eqx.nn.GRUCell`'s (every weight and
    bias uniform in ±1/sqrt(hidden_size)), the only one before 2026-12-06. Same gates and
    parameters' shapes either way."""
    sequence_length: int | None = eqx.field(default=None, static=True)
    """For ``network="gru"``: the loss re-runs the rollout in sequences of this many steps
    (dividing ``num_steps``), each from the hidden state the rollout had at its start, and a
    minibatch is ``minibatch_size // sequence_length`` of them: a minibatch then costs
    ``sequence_length`` GRU steps, not ``num_steps``. None: whole env rollouts, as
    PureJaxRL's ``ppo_rnn.py``."""
    activation: str = eqx.field(default="relu", static=True)
    """Hidden-layer activation: "relu" (the reference's) or "tanh" (PureJaxRL's default)."""
    squash_actions: bool = eqx.field(default=False, static=True)
    """Continuous actions: squash the Gaussian with tanh into the env's bounds (log-prob with
    the change-of-variables term) instead of clipping the sample at the bounds."""
    state_dependent_std: bool = eqx.field(default=False, static=True)
    """Continuous actions: the log-std is a network output per observation instead of one
    learned parameter per action dimension (the PureJaxRL / CleanRL default)."""
    normalize_obs: bool | None = eqx.field(default=None, static=True)
    """Normalise observations by their running mean and variance, per agent (PureJaxRL's
    NormalizeVecObservation). None: on for continuous-action envs, off otherwise."""
    normalize_reward: bool | None = eqx.field(default=None, static=True)
    """Scale rewards by the running std of the discounted return, per agent (PureJaxRL's
    NormalizeVecReward); metrics still report raw returns. None: as ``normalize_obs``."""
    matmul_precision: str = eqx.field(default="default", static=True)
    """Precision of the networks' float32 matrix products while training: "default" (the
    backend's: float32 on a CPU, one bfloat16 pass on a TPU, as PureJaxRL and most JAX code
    run), "high" (three bfloat16 passes) or "highest" (float32 on every backend). On a CPU
    all three compute the same; docs/guide.md ("On a TPU or GPU") has what each costs."""

    # ---- traced: numeric leaves, vmappable -----------------------------------------------
    lr: float = 3e-4
    """Adam learning rate."""
    adam_eps: float = 1e-7
    """Adam epsilon."""
    gamma: float = 0.99
    """Discount factor, in (0, 1]."""
    gae_lambda: float = 0.95
    """GAE λ, in (0, 1]."""
    clip_eps: float = 0.2
    """PPO ratio clip ε (and the value clip when ``clip_value``)."""
    ent_coef: float = 0.01
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient: loss = pg + vf_coef·mean((V − target)²) − ent_coef·entropy."""
    max_grad_norm: float | None = None
    """Global gradient-norm clip; None disables clipping (the reference's choice)."""
    log_std_init: float = 0.0
    """Continuous actions: the Gaussian policy's initial log-std (of the learned parameter;
    with ``state_dependent_std``, the bias of its head)."""

    def __check_init__(self):
        _validate(self)

    # ---- derived sizes -------------------------------------------------------------------
    @property
    def batch_size(self) -> int:
        """Transitions collected per update: ``num_envs * num_steps``."""
        return self.num_envs * self.num_steps

    @property
    def num_minibatches(self) -> int:
        return self.batch_size // self.minibatch_size

    @property
    def num_updates(self) -> int:
        return self.total_timesteps // self.batch_size

    @classmethod
    def from_purejaxrl(cls, d: dict) -> PPOConfig:
        """A config from a PureJaxRL ``ppo.py`` config dict, with PureJaxRL's algorithm.

        Keys: LR, NUM_ENVS, NUM_STEPS, TOTAL_TIMESTEPS, UPDATE_EPOCHS, NUM_MINIBATCHES,
        GAMMA, GAE_LAMBDA, CLIP_EPS, ENT_COEF, VF_COEF, MAX_GRAD_NORM, ACTIVATION, ENV_NAME,
        ANNEAL_LR (DEBUG is accepted and ignored). Selected to match PureJaxRL: separate
        64-64 actor and critic MLPs with orthogonal init, per-minibatch advantage
        normalisation, value clipping at CLIP_EPS, global-norm gradient clipping, Adam
        eps 1e-5, and its LR annealing. One difference is kept: a time limit bootstraps
        (``bootstrap_truncation``), where their scripts end the return as at a termination;
        ``.replace(bootstrap_truncation=False)`` gives theirs. Two translations:

        * PureJaxRL's value loss is ``0.5 * mean(max(...))``; ours has no 0.5, so
          ``vf_coef = 0.5 * VF_COEF`` gives the same gradient.
        * PureJaxRL runs ``TOTAL_TIMESTEPS // (NUM_ENVS * NUM_STEPS)`` updates. When that
          drops steps (5e5 at 4 × 128 runs 499,712), we do the same and say so in a warning;
          we never train fewer steps silently.

        A ``ppo_continuous_action.py`` dict (it has ``NORMALIZE_ENV``; ``BACKEND`` optional)
        maps to that script: 256-256 actor and critic MLPs, a diagonal Gaussian with a
        learned state-independent log-std starting at 0, actions clipped to the env's bounds,
        observation and reward normalisation as ``NORMALIZE_ENV`` says, and a Brax
        ``ENV_NAME`` (e.g. "hopper") as ``env="brax/hopper"`` with ``brax_backend=BACKEND``
        (PureJaxRL's default: "positional").
        """
        import warnings

        known = set(PUREJAXRL_KEYS) | {"DEBUG", "NORMALIZE_ENV", "BACKEND"}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(
                f"PPOConfig.from_purejaxrl: unknown keys {unknown}; known keys: "
                f"{sorted(PUREJAXRL_KEYS)} (and NORMALIZE_ENV, BACKEND of the continuous "
                "script; DEBUG, ignored)."
            )
        missing = sorted(set(PUREJAXRL_KEYS) - set(d))
        if missing:
            raise ValueError(f"PPOConfig.from_purejaxrl: missing keys {missing}.")
        batch = int(d["NUM_ENVS"]) * int(d["NUM_STEPS"])
        if batch % int(d["NUM_MINIBATCHES"]):
            raise ValueError(
                f"PPOConfig.from_purejaxrl: NUM_MINIBATCHES={d['NUM_MINIBATCHES']} must divide "
                f"NUM_ENVS*NUM_STEPS={batch}."
            )
        total = int(d["TOTAL_TIMESTEPS"]) // batch * batch
        if total != d["TOTAL_TIMESTEPS"]:
            warnings.warn(
                f"TOTAL_TIMESTEPS={d['TOTAL_TIMESTEPS']} is not a multiple of NUM_ENVS*NUM_STEPS="
                f"{batch}; like PureJaxRL, {total // batch} updates = {total} steps will run.",
                stacklevel=2,
            )
        continuous = "NORMALIZE_ENV" in d
        env, backend = d["ENV_NAME"], d.get("BACKEND", "positional")
        if "BACKEND" in d and not continuous:
            raise ValueError("PPOConfig.from_purejaxrl: BACKEND needs NORMALIZE_ENV (the "
                             "ppo_continuous_action.py config); ppo.py has neither.")  # fmt: skip
        if continuous and env not in _known_env_names():
            env = f"brax/{env}"  # the continuous script's envs are Brax's
        normalize = bool(d["NORMALIZE_ENV"]) if continuous else False
        return cls(
            env=env,
            brax_backend=backend if env.startswith("brax/") else "positional",
            normalize_obs=normalize,
            normalize_reward=normalize,
            num_envs=int(d["NUM_ENVS"]),
            num_steps=int(d["NUM_STEPS"]),
            total_timesteps=total,
            update_epochs=int(d["UPDATE_EPOCHS"]),
            minibatch_size=batch // int(d["NUM_MINIBATCHES"]),
            lr=float(d["LR"]),
            adam_eps=1e-5,
            gamma=float(d["GAMMA"]),
            gae_lambda=float(d["GAE_LAMBDA"]),
            clip_eps=float(d["CLIP_EPS"]),
            ent_coef=float(d["ENT_COEF"]),
            vf_coef=0.5 * float(d["VF_COEF"]),
            max_grad_norm=float(d["MAX_GRAD_NORM"]),
            activation=d["ACTIVATION"],
            anneal_lr=bool(d["ANNEAL_LR"]),
            network="separate",
            conv_channels=(),
            mlp_widths=(256, 256) if continuous else (64, 64),
            normalize_advantages=True,
            clip_value=True,
        )

    def replace(self, **changes) -> PPOConfig:
        """A copy with ``changes`` applied (the config itself is never mutated)."""
        return dataclasses.replace(self, **changes)

    def static_fields(self) -> dict:
        """The static (shape-fixing) fields and their values."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if _is_static(f)}

    def traced(self) -> PPOConfig:
        """The same config with every numeric leaf as a float32 array, ready to trace."""
        return jax.tree.map(lambda x: jnp.asarray(x, jnp.float32), self)

    def batched(self, **leaves) -> PPOConfig:
        """A copy whose traced fields ``leaves`` are arrays with a leading agent axis.

        The constructor refuses arrays with a shape (one config, one value per field); a
        batch of hyperparameters for `jax.vmap` or the engine is built here instead, like
        ``jax.tree.map`` does, without that check.
        """
        unknown = set(leaves) - set(TRACED_FIELDS)
        if unknown:
            raise ValueError(f"PPOConfig.batched: {sorted(unknown)} are not traced fields.")
        new = copy.copy(self)
        for name, value in leaves.items():
            object.__setattr__(new, name, value)
        return new


def _known_env_names() -> set[str]:
    from .envs import GYMNAX_ENVS, JUMANJI_ENVS

    return {"Maze-v0", *GYMNAX_ENVS, *JUMANJI_ENVS}


def static_field_names() -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(PPOConfig) if _is_static(f))


def _is_static(f: dataclasses.Field) -> bool:
    return bool(f.metadata.get("static", False))


def _check_recurrent(c: PPOConfig) -> None:
    """A recurrent network learns from env sequences; refuse what it cannot do."""
    h = c.hidden_size
    if not isinstance(h, numbers.Integral) or isinstance(h, bool) or h < 1:
        _fail("hidden_size", h, "the GRU's hidden state needs a positive integer size.")
    L = c.sequence_length
    widths = c.head_widths
    if not isinstance(widths, tuple) or not all(
        isinstance(w, numbers.Integral) and not isinstance(w, bool) and w > 0 for w in widths
    ):
        _fail("head_widths", widths, "use a tuple of positive layer widths, e.g. (128,), or ().")
    gain = c.head_init_gain
    if not isinstance(gain, numbers.Real) or isinstance(gain, bool) or not 0 < gain < math.inf:
        _fail("head_init_gain", gain, "use a positive number, e.g. 1.414 (sqrt 2) or 2.0.")
    if c.gru_init not in GRU_INITS:
        _fail("gru_init", c.gru_init, f"use one of {list(GRU_INITS)}.")
    if c.network != "gru":
        if h != 128:
            _fail("hidden_size", h, f"it applies to network='gru' only, not {c.network!r}.")
        if widths:
            _fail("head_widths", widths, f"it applies to network='gru' only, not {c.network!r}.")
        if c.head_init_gain != GRU_DEFAULTS["head_init_gain"]:
            _fail("head_init_gain", c.head_init_gain, "it applies to network='gru' only.")
        if c.gru_init != GRU_DEFAULTS["gru_init"]:
            _fail("gru_init", c.gru_init, "it applies to network='gru' only.")
        if L is not None:
            _fail("sequence_length", L, f"it applies to network='gru' only, not {c.network!r}.")
        return
    if gain != GRU_DEFAULTS["head_init_gain"] and not widths:
        _fail("head_init_gain", gain, "it sets the heads' hidden layers: give head_widths too.")
    if L is not None and (
        not isinstance(L, numbers.Integral) or isinstance(L, bool) or L < 1 or c.num_steps % L
    ):
        _fail(
            "sequence_length",
            L,
            f"need a positive number of steps that divides num_steps={c.num_steps} (or None: "
            "whole rollouts).",
        )
    L = c.num_steps if L is None else int(L)
    if c.minibatch_size % L:
        sequences = c.batch_size // L
        per = max(1, c.minibatch_size // L)
        while sequences % per:
            per -= 1
        what = "whole env sequences of num_steps" if L == c.num_steps else "sequences of"
        name = "num_steps" if L == c.num_steps else "sequence_length"
        _fail(
            "minibatch_size",
            c.minibatch_size,
            f"a recurrent network learns from {what}={L}; use a multiple of "
            f"{name} that divides the batch, e.g. {per * L} ({per} "
            f"sequence{'s' * (per > 1)} per minibatch), or set sequence_length.",
        )


def _validate(c: PPOConfig) -> None:
    """Refuse bad configs before anything compiles. Traced (array) leaves are skipped."""
    for name in static_field_names():
        v = getattr(c, name)
        if isinstance(v, (jax.Array, np.ndarray)) or isinstance(v, jax.core.Tracer):
            raise ValueError(
                f"PPOConfig.{name} is static (it fixes shapes or loop lengths) and cannot be an "
                f"array or be vmapped. Static fields: {list(static_field_names())}. To try "
                f"several values, use sweep(cfg, {name}=[...]), which runs one program per value."
            )
    for name in (
        "num_envs",
        "num_steps",
        "update_epochs",
        "minibatch_size",
        "total_timesteps",
    ):
        v = getattr(c, name)
        if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v <= 0:
            _fail(name, v, "it must be a positive integer.")
    if c.batch_size % c.minibatch_size:
        _fail(
            "minibatch_size",
            c.minibatch_size,
            f"it must divide the batch num_envs*num_steps={c.batch_size}.",
        )
    if c.total_timesteps < c.batch_size:
        _fail(
            "total_timesteps",
            c.total_timesteps,
            f"it is smaller than one batch (num_envs*num_steps={c.batch_size}).",
        )
    if c.total_timesteps % c.batch_size:
        lo = c.total_timesteps // c.batch_size * c.batch_size
        _fail(
            "total_timesteps",
            c.total_timesteps,
            f"it must be a multiple of the batch num_envs*num_steps={c.batch_size}; "
            f"use {lo} or {lo + c.batch_size}.",
        )
    if any((not isinstance(w, numbers.Integral)) or w <= 0 for w in c.conv_channels + c.mlp_widths):
        _fail(
            "conv_channels/mlp_widths",
            (c.conv_channels, c.mlp_widths),
            "widths must be > 0.",
        )
    from ._networks import ACTIVATIONS, NETWORKS

    if c.network not in NETWORKS:
        _fail("network", c.network, f"use one of {list(NETWORKS)}.")
    if c.activation not in ACTIVATIONS:
        _fail("activation", c.activation, f"use one of {list(ACTIVATIONS)}.")
    if c.matmul_precision not in MATMUL_PRECISIONS:
        _fail("matmul_precision", c.matmul_precision, f"use one of {list(MATMUL_PRECISIONS)}.")
    _check_recurrent(c)
    for name in ("squash_actions", "state_dependent_std", "bootstrap_truncation"):
        if not isinstance(getattr(c, name), bool):
            _fail(name, getattr(c, name), "use True or False.")
    for name in ("normalize_obs", "normalize_reward"):
        if getattr(c, name) not in (None, True, False):
            _fail(name, getattr(c, name), "use True, False or None (None: on for continuous envs).")

    def check(name, ok, fix):
        v = getattr(c, name)
        if isinstance(v, jax.core.Tracer):
            return  # traced under the caller's vmap/jit: checked by the caller's own values
        if isinstance(v, (jax.Array, np.ndarray)):
            if v.ndim:
                _fail(
                    name,
                    v,
                    f"a config holds one value per field, not shape {v.shape}; to train "
                    f"several values use sweep(cfg, {name}=[...]) (or stack whole configs "
                    "with jax.tree.map for your own jax.vmap).",
                )
            v = v.item()
        if isinstance(v, (str, bool)) or not isinstance(v, numbers.Real):
            _fail(name, v, "it must be a number.")
        if not math.isfinite(float(v)):
            _fail(name, v, "it must be a finite number.")
        if not ok(float(v)):
            _fail(name, v, fix)

    check("lr", lambda v: v > 0, "the learning rate must be > 0.")
    check("adam_eps", lambda v: v > 0, "Adam's epsilon must be > 0.")
    check("gamma", lambda v: 0 < v <= 1, "γ must lie in (0, 1].")
    check("gae_lambda", lambda v: 0 < v <= 1, "λ must lie in (0, 1].")
    check("clip_eps", lambda v: v > 0, "clip ε must be > 0 (0 would allow no update at all).")
    check("ent_coef", lambda v: v >= 0, "the entropy coefficient must be >= 0.")
    check("vf_coef", lambda v: v >= 0, "the value coefficient must be >= 0.")
    if c.max_grad_norm is not None:
        check("max_grad_norm", lambda v: v > 0, "use a positive norm, or None to disable.")
    check("log_std_init", lambda v: -20 <= v <= 5, "use a log-std in [-20, 5] (0: std 1).")

    # the env options are checked by `EnvOptions.__check_init__`, which equinox runs next
