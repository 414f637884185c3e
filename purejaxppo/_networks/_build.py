"""`PPOConfig.network` → a network: the one list of choices, and the builder."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import Array, PRNGKeyArray

from ._base import AbstractActorCritic
from ._feedforward import PerCellActorCritic, SeparateActorCritic, SharedActorCritic
from ._gru import GRUActorCritic

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
