"""The agents' inputs: PRNG keys and per-agent hyperparameters, and their count.

An agent is one row of the leading axis of ``keys`` and of every traced hyperparameter
(`PPOConfig.batched`); `agent_inputs` lays out (settings × seeds), `batched` broadcasts
scalars, `num_agents_of` checks they agree.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from ._config import TRACED_FIELDS, PPOConfig, static_field_names


def num_agents_of(keys, hparams: PPOConfig, cfg: PPOConfig | None = None) -> int:
    """The agent count of ``keys`` and ``hparams``; with ``cfg`` (the engine's config), also
    refuse hyperparameters built from another config: their static fields would silently
    choose another program (another network, env or shape) than the engine's."""
    if cfg is not None:
        for name in static_field_names():
            mine, theirs = getattr(cfg, name), getattr(hparams, name)
            if mine is not theirs and mine != theirs:
                raise ValueError(
                    f"Engine: the hyperparameters have {name}={theirs!r} but the engine's "
                    f"config has {name}={mine!r}; build them from the engine's config "
                    "(agent_inputs(engine.cfg, ...))."
                )
    sizes = {np.shape(x)[0] for x in jax.tree.leaves(hparams) if np.ndim(x) > 0}
    if keys is not None:
        sizes.add(np.shape(keys)[0])
    if len(sizes) != 1:
        raise ValueError(
            f"Engine: keys and batched hyperparameters disagree on the number of agents "
            f"(leading sizes {sorted(sizes)}); give each hyperparameter one value per agent."
        )
    return sizes.pop()


def batched(hparams: PPOConfig, n: int) -> PPOConfig:
    """Traced hyperparameters as float32 arrays of shape (n,) (scalars broadcast).

    Host values stay numpy (placed later); traced values (under a caller's transformation)
    are broadcast with jax.
    """
    changes = {}
    for name in TRACED_FIELDS:
        v = getattr(hparams, name)
        if v is None:
            continue
        if isinstance(v, jax.core.Tracer):
            changes[name] = jnp.broadcast_to(jnp.asarray(v, jnp.float32), (n,))
        else:
            changes[name] = np.broadcast_to(np.asarray(v, np.float32), (n,))
    return hparams.batched(**changes)


def agent_inputs(
    base: PPOConfig, values: dict[str, np.ndarray], seeds: list[int]
) -> tuple[np.ndarray, PPOConfig, tuple[int, ...]]:
    """Keys and per-agent hyperparameters of (settings × seeds) agents, and their shape.

    ``values`` maps traced field names to arrays of one shape (the settings grid); every
    setting runs every seed. The flat agent axis is settings-major, seeds minor, so agent
    ``i`` is setting ``i // len(seeds)``, seed ``seeds[i % len(seeds)]``; seed ``s`` trains
    with ``jax.random.PRNGKey(s)`` in every setting (common random numbers).
    """
    settings_shape = next(iter(values.values())).shape if values else ()
    n_settings, n_seeds = math.prod(settings_shape), len(seeds)
    leaves = {}
    for name in TRACED_FIELDS:
        default = getattr(base, name)
        if name in values:
            flat = np.repeat(np.asarray(values[name]).reshape(-1), n_seeds)
        elif default is None:
            continue
        else:
            flat = np.full(n_settings * n_seeds, default)
        leaves[name] = np.asarray(flat, np.float32)
    hparams = base.traced().batched(**leaves)
    keys = np.stack([np.asarray(jax.random.PRNGKey(s)) for s in seeds] * n_settings)
    return keys, hparams, (*settings_shape, n_seeds)
