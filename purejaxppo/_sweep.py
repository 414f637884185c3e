"""Many agents in one program: labelled sweeps over seeds and hyperparameters.

``sweep(cfg, seeds=64, lr=[1e-4, 3e-4], ent_coef=[0.0, 0.01])`` trains every combination
(2 × 2 settings × 64 seeds = 256 agents) with `jax.vmap` over one `make_train` program, and
returns the metrics with labelled axes ``("lr", "ent_coef", "seed", "update")``.

**Seeds and keys.** Seed ``s`` is trained with ``jax.random.PRNGKey(s)``; ``seeds=N`` means
seeds ``0 … N-1``, and a list of ints chooses them. The same seed gets the same key in every
hyperparameter setting (common random numbers), so ``res.agent(lr=…, seed=5)`` equals
``make_train(cfg.replace(lr=…))(jax.random.PRNGKey(5))``.

**Static fields** (shapes and loop lengths) cannot be vmapped. Given several values, they run
one program per static combination; the results are stacked on the same labelled axes (the
update axis is padded with NaN where static settings give different numbers of updates).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import numbers
from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._config import TRACED_FIELDS, PPOConfig, static_field_names
from ._ppo import Metrics, RunnerState, make_train

LOG_UNIFORM_FIELDS = ("lr", "adam_eps")  # random search samples these log-uniformly


class Agent(eqx.Module):
    """One agent picked out of a sweep: its config, key, final state and metrics."""

    config: PPOConfig
    seed: int = eqx.field(static=True)
    state: RunnerState
    metrics: Metrics  # leading axis: update
    diverged: bool = eqx.field(static=True)


@dataclasses.dataclass(frozen=True)
class SweepResult:
    """Sweep results with labelled axes.

    ``metrics`` leaves have shape ``(*axis_sizes, num_updates)``; ``state`` leaves and
    ``diverged`` have shape ``axis_sizes``. ``axes`` maps each axis name to its coordinates,
    in order; the last swept axis before ``"update"`` is always ``"seed"``. For random search
    the hyperparameter axis is ``"sample"`` and ``values`` holds each sample's values.
    """

    metrics: Metrics
    state: RunnerState
    diverged: np.ndarray
    axes: dict
    values: dict  # field name -> array of shape axis_sizes[:-1]
    config: PPOConfig

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(v) for v in self.axes.values())

    def _state_at(self, index: tuple[int, ...]) -> RunnerState:
        if not isinstance(self.state, list):
            return jax.tree.map(lambda x: x[index], self.state)
        # Static settings with different shapes: one stacked state per static combination.
        n = len(self.state_static_shape)
        which = int(np.ravel_multi_index(index[:n], self.state_static_shape))
        return jax.tree.map(lambda x: x[index[n:]], self.state[which])

    @property
    def state_static_shape(self) -> tuple[int, ...]:
        return tuple(len(self.axes[k]) for k in self.axes if k in static_field_names())

    def agent(self, **coords) -> Agent:
        """The agent at the given coordinates, e.g. ``res.agent(lr=3e-4, seed=5)``.

        Axes of length one may be omitted. For random search, give ``sample=i``.
        """
        unknown = set(coords) - set(self.axes)
        if unknown:
            raise ValueError(f"unknown sweep axes {sorted(unknown)}; axes are {list(self.axes)}.")
        index = []
        for name, coord in self.axes.items():
            if name not in coords:
                if len(coord) != 1:
                    raise ValueError(f"agent(): give {name}=one of {list(coord)}.")
                index.append(0)
                continue
            matches = [i for i, c in enumerate(coord) if _same(c, coords[name])]
            if not matches:
                raise ValueError(f"agent(): {name}={coords[name]!r} is not one of {list(coord)}.")
            index.append(matches[0])
        index = tuple(index)
        changes = {k: _py(v[index[:-1]]) for k, v in self.values.items()}
        for (name, coord), i in zip(self.axes.items(), index, strict=True):
            if name in static_field_names():
                changes[name] = coord[i]
        config = self.config.replace(**changes)
        return Agent(
            config=config,
            seed=int(self.axes["seed"][index[-1]]),
            state=self._state_at(index),
            metrics=jax.tree.map(lambda x: x[index], self.metrics),
            diverged=bool(self.diverged[index]),
        )


def sweep(
    cfg: PPOConfig,
    seeds: int | Sequence[int] = 1,
    *,
    search: str = "grid",
    num_samples: int | None = None,
    sample_seed: int = 0,
    divergence_grad_norm: float = 1e6,
    **axes: Any,
) -> SweepResult:
    """Train every (hyperparameter setting × seed) of a sweep in one vmapped program.

    Args:
        cfg: the base config; swept fields override it.
        seeds: number of seeds (0 … N-1) or an explicit list of seed ints.
        search: ``"grid"`` (product of the given lists) or ``"random"`` (``num_samples``
            draws; each field is a ``(low, high)`` range, log-uniform for ``lr`` and
            ``adam_eps``, uniform otherwise).
        num_samples: number of random-search samples.
        sample_seed: seed of the random-search draws.
        divergence_grad_norm: an agent is flagged in ``diverged`` when any parameter or loss
            becomes NaN/inf, when a step was skipped for a non-finite loss or gradient
            (``metrics.skipped_steps``), or when its gradient norm ever exceeds this. (Adam's
            normalised steps keep a blown-up agent finite: lr=50 gives norms of 1e12 with
            finite, useless parameters; healthy runs here stay below 1e2.)
        **axes: field name → list of values (grid) or (low, high) (random).
    """
    seed_list = _seeds(seeds)
    _check_axes(cfg, axes, search)
    static_axes = {k: list(v) for k, v in axes.items() if k in static_field_names()}
    traced_axes = {k: v for k, v in axes.items() if k not in static_axes}

    if search == "grid":
        names = list(traced_axes)
        grids = np.meshgrid(
            *[np.asarray(v, np.float64) for v in traced_axes.values()], indexing="ij"
        )
        values = {n: g for n, g in zip(names, grids, strict=True)}
        hyper_axes = {n: list(traced_axes[n]) for n in names}
    elif search == "random":
        if not isinstance(num_samples, int) or num_samples < 1:
            raise ValueError("sweep(search='random') needs num_samples=<positive int>.")
        rng = np.random.default_rng(sample_seed)
        values = {}
        for name, (low, high) in traced_axes.items():
            if name in LOG_UNIFORM_FIELDS:
                values[name] = np.exp(rng.uniform(np.log(low), np.log(high), num_samples))
            else:
                values[name] = rng.uniform(low, high, num_samples)
        hyper_axes = {"sample": list(range(num_samples))}
    else:
        raise ValueError(f"sweep(search={search!r}): use 'grid' or 'random'.")

    static_combos = list(itertools.product(*static_axes.values())) or [()]
    results = []
    for combo in static_combos:
        base = cfg.replace(**dict(zip(static_axes, combo, strict=True)))
        results.append(_run(base, values, seed_list, divergence_grad_norm))

    num_updates = max(r[0].episode_return.shape[-1] for r in results)
    metrics = [_pad_updates(r[0], num_updates) for r in results]
    stack = (lambda *xs: np.stack(xs)) if len(results) > 1 else (lambda x: x)
    metrics = jax.tree.map(stack, *metrics)
    states = [r[1] for r in results]
    try:
        state = jax.tree.map(stack, *states)
    except ValueError:  # different static shapes: keep a list per static setting
        state = states
    diverged = stack(*[r[2] for r in results])
    all_axes = {**static_axes, **hyper_axes, "seed": seed_list}
    if not static_axes:
        all_axes = {**hyper_axes, "seed": seed_list}
    return SweepResult(
        metrics=metrics,
        state=state,
        diverged=np.asarray(diverged),
        axes=all_axes,
        values={k: _broadcast_static(v, static_axes) for k, v in values.items()},
        config=cfg,
    )


def _run(base: PPOConfig, values: dict, seeds: list[int], max_grad_norm: float):
    """One program: vmap over (settings × seeds); returns arrays shaped (*settings, S, ...)."""
    settings_shape = next(iter(values.values())).shape if values else ()
    n_settings, n_seeds = math.prod(settings_shape), len(seeds)
    leaves = {}
    for name in TRACED_FIELDS:
        default = getattr(base, name)
        if name in values:
            flat = np.repeat(values[name].reshape(-1), n_seeds)  # settings-major, seeds minor
        elif default is None:
            continue
        else:
            flat = np.full(n_settings * n_seeds, default)
        leaves[name] = jnp.asarray(flat, jnp.float32)
    batched = dataclasses.replace(base.traced(), **leaves)
    keys = jnp.stack([jax.random.PRNGKey(s) for s in seeds] * n_settings)
    state, metrics = jax.vmap(_cached_train(base))(keys, batched)
    shape = (*settings_shape, n_seeds)
    metrics = jax.tree.map(lambda x: np.asarray(x).reshape(*shape, *x.shape[1:]), metrics)
    state = jax.tree.map(lambda x: x.reshape(*shape, *x.shape[1:]), state)
    return metrics, state, _diverged(state, metrics, len(shape), max_grad_norm)


_TRAINS: dict = {}


def _cached_train(cfg: PPOConfig):
    """One `Train` per static configuration, so same-shape sweeps reuse the compiled program."""
    key = (tuple(cfg.static_fields().items()), cfg.max_grad_norm is None)
    if key not in _TRAINS:
        if len(_TRAINS) >= 8:
            _TRAINS.pop(next(iter(_TRAINS)))
        _TRAINS[key] = make_train(cfg)
    return _TRAINS[key]


def _diverged(state: RunnerState, metrics: Metrics, ndim: int, max_grad_norm: float):
    """An agent diverged if a parameter or loss became NaN/inf, or its gradients blew up."""

    def bad(x):
        x = np.asarray(x)
        if x.dtype.kind != "f":
            return np.zeros(x.shape[:ndim], bool)
        return ~np.isfinite(x.reshape(*x.shape[:ndim], -1)).all(-1)

    flags = [bad(x) for x in jax.tree.leaves(state.params)]
    for name in ("policy_loss", "value_loss", "entropy", "grad_norm"):
        flags.append(bad(getattr(metrics, name)))
    with np.errstate(invalid="ignore"):
        flags.append((np.asarray(metrics.grad_norm) > max_grad_norm).any(-1))
    flags.append((np.asarray(metrics.skipped_steps) > 0).any(-1))
    return np.logical_or.reduce(flags)


def _pad_updates(metrics: Metrics, n: int) -> Metrics:
    def pad(x):
        missing = n - x.shape[-1]
        if missing == 0:
            return x
        fill = np.nan if x.dtype.kind == "f" else 0
        return np.concatenate([x, np.full((*x.shape[:-1], missing), fill, x.dtype)], -1)

    return jax.tree.map(pad, metrics)


def _broadcast_static(v: np.ndarray, static_axes: dict) -> np.ndarray:
    sizes = tuple(len(x) for x in static_axes.values())
    return np.broadcast_to(v, (*sizes, *v.shape)) if sizes else v


def _seeds(seeds) -> list[int]:
    if isinstance(seeds, numbers.Integral) and not isinstance(seeds, bool):
        if seeds < 1:
            raise ValueError(f"sweep(seeds={seeds}): need at least one seed.")
        return list(range(int(seeds)))
    seeds = list(seeds)
    if not seeds or not all(isinstance(s, numbers.Integral) for s in seeds):
        raise ValueError(f"sweep(seeds={seeds!r}): give a count or a non-empty list of ints.")
    return [int(s) for s in seeds]


def _check_axes(cfg: PPOConfig, axes: dict, search: str) -> None:
    fields = set(TRACED_FIELDS) | set(static_field_names())
    for name, vals in axes.items():
        if name not in fields:
            close = [f for f in sorted(fields) if name.replace("_", "") in f.replace("_", "")]
            hint = f" Did you mean {close}?" if close else ""
            raise ValueError(
                f"sweep: unknown hyperparameter {name!r}.{hint} Traced (vmappable) fields: "
                f"{list(TRACED_FIELDS)}; static fields: {list(static_field_names())}."
            )
        if isinstance(vals, (str, bytes)) or not isinstance(vals, Sequence | np.ndarray):
            raise ValueError(f"sweep: {name}={vals!r} must be a list of values.")
        if len(vals) == 0:
            raise ValueError(f"sweep: {name}=[] is empty; give at least one value.")
        if name in TRACED_FIELDS:
            arr = np.asarray(vals)
            if arr.ndim != 1:
                raise ValueError(
                    f"sweep: {name} must be a flat list of numbers, got shape {arr.shape}."
                )
            if arr.dtype.kind not in "iuf" or arr.dtype == bool:
                raise ValueError(f"sweep: {name}={list(vals)!r} must be numbers.")
            if search == "random" and len(vals) != 2:
                raise ValueError(f"sweep(search='random'): {name} must be a (low, high) range.")
            if search == "grid":
                for v in vals:  # every value must make a valid config on its own
                    cfg.replace(**{name: float(v)})
        else:
            if search == "random":
                raise ValueError(
                    f"sweep: {name} is static (it fixes shapes) and cannot be sampled; "
                    "give it as a list in a grid sweep."
                )
            for v in vals:
                cfg.replace(**{name: v})


def _same(a, b) -> bool:
    if isinstance(a, numbers.Real) and isinstance(b, numbers.Real):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    return a == b


def _py(v):
    return float(v) if np.ndim(v) == 0 else v
