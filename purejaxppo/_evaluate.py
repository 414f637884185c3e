"""Evaluation of trained agents (all of a sweep in one program) and one agent as a policy.

`evaluate(cfg, params, key, num_episodes)` plays ``num_episodes`` episodes for every agent of
a batch of parameters (leading axis = agent, as `SweepResult.state.params` or a run
directory's ``params.eqx`` hold them), greedy or sampled, in one compiled program: vmap over
agents and episodes, one `lax.scan` over time. Each episode starts from a fresh
``reset`` with keys drawn from ``key`` (independent of the training keys, so random mazes are
new ones, never a training instance) and counts only its first episode. Every agent plays the
same episodes.

`Policy` is one agent's network as a plain callable, ``policy(obs, mask) -> action`` (with
memory: ``policy.step(hidden, obs, mask) -> (action, hidden)``); users of other libraries
trip on extracting it from vmapped parameters, so `policy_of` does that.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, Bool, Float, Int, PRNGKeyArray

from ._backend import matmul_precision
from ._config import PPOConfig
from ._distributions import Categorical, Distribution, policy_distribution
from ._networks import AbstractActorCritic, is_recurrent, network_shapes
from ._normalize import RunningStats, wanted
from .envs import Env, make_env


class EvalResult(NamedTuple):
    """Per agent and episode: leading axes ``(agents, num_episodes)``."""

    episode_return: Float[Array, "*batch E"]
    episode_length: Int[Array, "*batch E"]
    finished: Bool[Array, "*batch E"]  # False: still running at the step limit (counted as is)
    # The episode solved the task (`Env.success_return`: Maze reached the target,
    # Minesweeper cleared the board). Always False for envs without a notion of success:
    # check `has_success(cfg)` before reporting it.
    success: Bool[Array, "*batch E"]


class Policy(eqx.Module):
    """One agent's policy: ``policy(obs, mask, key=None) -> action``.

    ``obs`` is the encoded observation as the env gives it (for Maze-v0, the uint8 3×H×W
    image the env wrapper produces) and ``mask`` the legal actions (for continuous envs, the
    env's mask of ones); both may have leading batch axes. Without a ``key`` the action is
    greedy (the most probable legal action; a Gaussian's mean); with one it is sampled.
    Continuous actions come back as the env takes them (clipped or squashed into its bounds).
    ``obs_norm``: the observation statistics frozen at the end of training, applied first.

    A recurrent policy (``network="gru"``) has memory, which the caller carries::

        hidden = policy.initial_hidden(batch_shape)
        action, hidden = policy.step(hidden, obs, mask)         # every step
        hidden = policy.reset(hidden, done)                     # where an episode ended

    ``step`` works for every policy (a feedforward one's hidden state has size 0), so code
    written with it serves both; calling a recurrent policy without its memory is refused.
    """

    network: AbstractActorCritic
    dist: Distribution | None = None  # None: the network's categorical
    obs_norm: RunningStats | None = None

    @property
    def recurrent(self) -> bool:
        return is_recurrent(self.network)

    def initial_hidden(self, batch: tuple[int, ...] = ()) -> Float[Array, "*B H"]:
        """The memory of an episode's start, for ``batch`` envs (size 0 if feedforward)."""
        h = self.network.initial_hidden() if self.recurrent else jnp.zeros(0, jnp.float32)
        return jnp.broadcast_to(h, (*batch, h.shape[-1]))

    def reset(self, hidden: Float[Array, "*B H"], done: Bool[Array, "*B"]) -> Array:
        """``hidden`` with the envs whose episode ended set back to the initial memory."""
        return jnp.where(done[..., None], self.initial_hidden(), hidden)

    def __call__(
        self, obs: Array, mask: Bool[Array, "*B A"], key: PRNGKeyArray | None = None
    ) -> Int[Array, "*B"] | Int[Array, "*B k"] | Float[Array, "*B k"]:
        if self.recurrent:
            raise TypeError(
                "this policy is recurrent (network='gru'): call policy.step(hidden, obs, mask) "
                "with hidden = policy.initial_hidden(batch_shape), and carry the hidden state "
                "it returns (policy.reset(hidden, done) at episode ends)."
            )
        return self.step(self.initial_hidden(mask.shape[:-1]), obs, mask, key)[0]

    def step(
        self,
        hidden: Float[Array, "*B H"],
        obs: Array,
        mask: Bool[Array, "*B A"],
        key: PRNGKeyArray | None = None,
    ) -> tuple[Int[Array, "*B"] | Int[Array, "*B k"] | Float[Array, "*B k"], Array]:
        """One step: ``(action, new hidden)``; the action as in ``__call__``."""
        batch = mask.shape[:-1]
        dist = Categorical(self.network.action_dims) if self.dist is None else self.dist
        flat_obs = obs.reshape(-1, *obs.shape[len(batch) :])
        flat_hidden = hidden.reshape(flat_obs.shape[0], hidden.shape[-1])
        if self.obs_norm is not None:
            flat_obs = self.obs_norm.normalize(flat_obs)
        if self.recurrent:
            flat_hidden, (out, _) = jax.vmap(self.network.step)(flat_hidden, flat_obs)
        else:
            out, _ = jax.vmap(self.network)(flat_obs)
        p = dist.params(out, mask.reshape(-1, mask.shape[-1]))
        action = dist.mode(p) if key is None else dist.sample(key, p)
        action = dist.env_action(action)
        return action.reshape(*batch, *action.shape[1:]), flat_hidden.reshape(hidden.shape)


def policy_of(
    params: AbstractActorCritic,
    index: int | tuple[int, ...] = (),
    *,
    dist: Distribution | None = None,
    obs_norm: RunningStats | None = None,
) -> Policy:
    """The `Policy` of the agent at ``index`` of batched ``params`` (``()``: unbatched), with
    its batched observation statistics ``obs_norm`` if it trained with them."""
    pick = lambda tree: jax.tree.map(lambda x: jnp.asarray(x)[index], tree)  # noqa: E731
    return Policy(pick(params), dist, None if obs_norm is None else pick(obs_norm))


def has_success(cfg: PPOConfig) -> bool:
    """Whether ``cfg``'s env defines success (`EvalResult.success` means something)."""
    return make_env(cfg).success_return is not None


def evaluate(
    cfg: PPOConfig,
    params: AbstractActorCritic,
    key: PRNGKeyArray,
    num_episodes: int = 100,
    *,
    greedy: bool = True,
    max_steps: int | None = None,
    obs_norm: RunningStats | None = None,
    env: Any = None,
) -> EvalResult:
    """Play ``num_episodes`` fresh episodes with every agent of batched ``params``.

    ``params`` leaves have a leading agent axis (any number of leading axes is fine: they
    are flattened and restored). ``max_steps`` defaults to the env's episode limit.
    ``obs_norm``: the agents' observation statistics (``state.obs_norm``), required when the
    config normalises observations: the policy must see observations as in training.
    ``env``: your own environment (as in `make_train`): ``cfg.replace(env=env)``.
    """
    if env is not None:
        cfg = cfg.replace(env=env)
    if not isinstance(num_episodes, int) or num_episodes < 1:
        raise ValueError(f"evaluate(num_episodes={num_episodes!r}): need a positive int.")
    env = make_env(cfg)
    if wanted(cfg.normalize_obs, env) and obs_norm is None:
        raise ValueError(
            "evaluate: this config normalises observations; pass obs_norm=state.obs_norm (the "
            "agents' statistics) so the policy sees observations as it did in training."
        )
    dist = policy_distribution(cfg, env)
    steps = env.max_episode_steps if max_steps is None else max_steps
    leaves = jax.tree.leaves(params)
    like = jax.tree.leaves(network_shapes(cfg, env.obs_shape, dist))
    batch = leaves[0].shape[: leaves[0].ndim - like[0].ndim]
    flat = jax.tree.map(lambda x: jnp.reshape(x, (-1, *x.shape[len(batch) :])), params)
    if obs_norm is not None:
        obs_norm = jax.tree.map(lambda x: jnp.reshape(x, (-1, *x.shape[len(batch) :])), obs_norm)
    # Every agent plays the same episodes (same key: common random numbers), so agents are
    # compared on equal terms and an agent evaluated alone gets exactly its row here.
    out = _evaluate_all(
        flat, obs_norm, key, env, dist, num_episodes, steps, greedy, cfg.matmul_precision
    )
    return jax.tree.map(lambda x: x.reshape(*batch, *x.shape[1:]), out)


@eqx.filter_jit
def _evaluate_all(
    params,
    obs_norm,
    key,
    env: Env,
    dist,
    num_episodes: int,
    steps: int,
    greedy: bool,
    precision: str,
):
    def one_agent(net, norm, key):
        with matmul_precision(precision):
            return _episodes(net, norm, key)

    def _episodes(net, norm, key):
        reset_key, act_key = jax.random.split(key)
        state, obs, mask = jax.vmap(env.reset)(jax.random.split(reset_key, num_episodes))
        policy = Policy(net, dist, norm)
        zeros = jnp.zeros(num_episodes)

        def step(carry, k):
            state, obs, mask, hidden, ret, length, alive = carry
            action, hidden = policy.step(hidden, obs, mask, None if greedy else k)
            state, out = jax.vmap(env.step)(state, action)
            ret = ret + jnp.where(alive, out.reward, 0.0)
            length = length + alive.astype(jnp.int32)
            alive = alive & ~out.done  # only each env's first episode counts
            hidden = policy.reset(hidden, out.done)
            return (state, out.obs, out.mask, hidden, ret, length, alive), None

        hidden = policy.initial_hidden((num_episodes,))
        init = (state, obs, mask, hidden, zeros, zeros.astype(jnp.int32),
                jnp.ones(num_episodes, bool))  # fmt: skip
        (_, _, _, _, ret, length, alive), _ = jax.lax.scan(
            step, init, jax.random.split(act_key, steps)
        )
        threshold = jnp.inf if env.success_return is None else env.success_return
        return EvalResult(ret, length, ~alive, (~alive) & (ret >= threshold))

    return jax.vmap(one_agent, in_axes=(0, 0, None))(params, obs_norm, key)
