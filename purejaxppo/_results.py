"""What `sweep` and `pbt` return: results with labelled axes, and one agent picked out.

They live apart from the trainers so that the run directory (`purejaxppo.rundir`), which
writes and reads them, sits below the trainers in the import order.
"""

from __future__ import annotations

import dataclasses
import itertools
import numbers
from typing import NamedTuple

import equinox as eqx
import jax
import numpy as np

from ._axes import index_of, split_program, static_setting
from ._config import PPOConfig, static_field_names
from ._ppo import Metrics, RunnerState
from .stats import bootstrap_ci, final_scores, iqm


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
    ``timings`` holds this call's ``compile_s`` and ``run_s`` and, per static setting in
    ``programs``, those plus ``updates_run`` and ``group_size`` (the agents per group the
    program ran, on each device). ``compile_s`` is the time the call waited for compiles:
    on an accelerator a chunked run compiles its chunks' programs in the background
    (`Engine.compile_ahead`), so it can be less than the compiles took.
    """

    metrics: Metrics
    state: RunnerState
    diverged: np.ndarray
    axes: dict
    values: dict  # field name -> array of shape axis_sizes[:-1]
    config: PPOConfig
    finished: bool = True  # False when a checkpointed sweep was stopped early
    timings: dict = dataclasses.field(default_factory=dict)  # compile_s, run_s, programs

    def diverged_agents(self) -> list[dict]:
        """Each diverged agent by name: its swept coordinates, hyperparameters and seed."""
        names = []
        for index in zip(*np.nonzero(self.diverged), strict=True):
            coords = {k: _py(v[i]) for (k, v), i in zip(self.axes.items(), index, strict=True)}
            hp = {k: _py(v[index[: v.ndim]]) for k, v in self.values.items()}
            names.append({**coords, **{k: v for k, v in hp.items() if k not in coords}})
        return names

    def summary(self, last: int = 10, confidence: float = 0.95) -> list[dict]:
        """One row per hyperparameter setting, over its *healthy* seeds (never NaN/inf
        because of a diverged agent, which is left out and named in ``diverged``).

        Each seed's score is its mean episode return over the last ``last`` updates that
        finished episodes. Row keys: the setting's coordinates, ``seeds``, ``healthy``,
        ``scored`` (healthy seeds that finished an episode), ``return_mean``,
        ``return_iqm`` with ``iqm_ci`` (percentile bootstrap over seeds), ``return_min``,
        ``return_max`` and ``diverged`` (the seeds left out).
        """
        scores = final_scores(np.asarray(self.metrics.episode_return), last)
        setting_axes = list(self.axes)[:-1]
        rows = []
        for index in itertools.product(*[range(len(self.axes[k])) for k in setting_axes]):
            per_seed = scores[index]
            healthy = ~self.diverged[index]
            good = per_seed[healthy & np.isfinite(per_seed)]
            row = {k: _py(self.axes[k][i]) for k, i in zip(setting_axes, index, strict=True)}
            for k, v in self.values.items():
                row.setdefault(k, _py(v[index[: v.ndim]]))
            seeds = self.axes["seed"]
            row.update(
                seeds=len(seeds),
                healthy=int(healthy.sum()),
                scored=int(good.size),
                return_mean=float(good.mean()) if good.size else None,
                return_iqm=float(iqm(good)) if good.size else None,
                iqm_ci=tuple(bootstrap_ci(good, iqm, confidence)) if good.size > 1 else None,
                return_min=float(good.min()) if good.size else None,
                return_max=float(good.max()) if good.size else None,
                diverged=[seeds[i] for i in np.nonzero(self.diverged[index])[0]],
            )
            rows.append(row)
        return rows

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(v) for v in self.axes.values())

    def _state_at(self, index: tuple[int, ...]) -> RunnerState:
        if not isinstance(self.state, list):
            return jax.tree.map(lambda x: x[index], self.state)
        # Static settings with different shapes: one stacked state per static combination.
        program, local = split_program(self.axes, index)
        return jax.tree.map(lambda x: x[local], self.state[program])

    @property
    def state_static_shape(self) -> tuple[int, ...]:
        return tuple(len(self.axes[k]) for k in self.axes if k in static_field_names())

    def agent(self, **coords) -> Agent:
        """The agent at the given coordinates, e.g. ``res.agent(lr=3e-4, seed=5)``.

        Axes of length one may be omitted. For random search, give ``sample=i``.
        """
        return self.agent_at(index_of(self.axes, coords))

    def agent_at(self, index: tuple[int, ...]) -> Agent:
        """The agent at an index into the swept axes (``metrics`` leaves' leading axes)."""
        changes = {k: _py(v[index[:-1]]) for k, v in self.values.items()}
        changes.update(static_setting(self.axes, index))
        return Agent(
            config=self.config.replace(**changes),
            seed=int(self.axes["seed"][index[-1]]),
            state=self._state_at(index),
            metrics=jax.tree.map(lambda x: x[index], self.metrics),
            diverged=bool(self.diverged[index]),
        )


def _py(v):
    if isinstance(v, (np.integer, int)) and not isinstance(v, bool):
        return int(v)
    return float(v) if np.ndim(v) == 0 and isinstance(v, (numbers.Real, np.floating)) else v


@dataclasses.dataclass(frozen=True)
class PBTAgent:
    """One agent of a PBT run with its whole history."""

    index: int
    config: PPOConfig  # the hyperparameters it ended with
    state: RunnerState
    metrics: Metrics  # leading axis: update; along its ancestry
    hyperparameters: dict  # field -> (update,): its schedule along its ancestry
    ancestry: list  # (generation, agent) whose state it ran in each generation, first to last
    fitness: float  # over the last interval


@dataclasses.dataclass(frozen=True)
class PBTResult:
    """A PBT run. ``metrics`` leaves and ``hyperparameters`` values are ``(population,
    update)``; ``lineage`` is ``(population, generation)``: the agent whose state agent ``i``
    started generation ``g`` from (column 0: itself); ``fitness`` is ``(population,
    generation)``, each generation's fitness (the last one's over its final ``interval``
    updates). ``timings``: ``compile_s`` and ``run_s`` of this call."""

    metrics: Metrics
    state: RunnerState
    hyperparameters: dict
    lineage: np.ndarray
    fitness: np.ndarray
    config: PPOConfig
    interval: int
    finished: bool = True
    timings: dict = dataclasses.field(default_factory=dict)

    @property
    def population(self) -> int:
        return self.lineage.shape[0]

    def best(self) -> PBTAgent:
        """The agent with the best fitness at the end (lowest index on a tie)."""
        return self.agent(int(np.argmax(self.fitness[:, -1])))

    def agent(self, i: int) -> PBTAgent:
        """Agent ``i`` with its ancestry, and its history along that ancestry: in each
        generation, the metrics and hyperparameters of the agent whose state it continues
        (the schedule that made its final parameters)."""
        ancestry, who = [], i
        for g in range(self.lineage.shape[1] - 1, -1, -1):
            ancestry.append((g, who))
            who = int(self.lineage[who, g])
        ancestry = ancestry[::-1]
        rows = np.repeat([a for _, a in ancestry], self.interval)[: self.num_updates]
        cols = np.arange(self.num_updates)
        hp = {k: v[rows, cols] for k, v in self.hyperparameters.items()}
        final = {k: float(v[i, -1]) for k, v in self.hyperparameters.items()}
        return PBTAgent(
            index=i,
            config=self.config.replace(**final),
            state=jax.tree.map(lambda x: x[i], self.state),
            metrics=jax.tree.map(lambda x: np.asarray(x)[rows, cols], self.metrics),
            hyperparameters=hp,
            ancestry=ancestry,
            fitness=float(self.fitness[i, -1]),
        )

    @property
    def num_updates(self) -> int:
        return self.metrics.episode_return.shape[1]


class History(NamedTuple):
    """What a PBT run has recorded so far (host arrays; NaN / -1 where not yet run)."""

    metrics: Metrics  # (A, U)
    hyperparameters: dict  # field -> (A, U)
    lineage: np.ndarray  # (A, G)
    fitness: np.ndarray  # (A, G)
    done: np.ndarray  # generations done (a 0-d int array, so it checkpoints with the rest)


def unfilled(shape: tuple[int, ...], dtype) -> np.ndarray:
    """An array for results not yet run: NaN (0 for counts), never a stale value."""
    return np.full(shape, np.nan if np.dtype(dtype).kind == "f" else 0, dtype)
