"""Population-based training inside the one program.

``pbt(cfg, population=64, interval=10, lr=(1e-5, 1e-2))`` trains a population whose
hyperparameters are drawn like a random search (`sweep`), and after every ``interval`` updates
lets it act on itself, as array operations on the agent axis inside the same compiled program
(`Engine.run_generations`): no recompile, no host round trip.

**Exploit (truncation).** The agents are ranked by fitness (mean episode return over the last
interval). Each of the bottom ``fraction`` (at least one agent) copies the training state of
an agent drawn uniformly from the top ``fraction``: the whole `RunnerState` — parameters,
optimiser state, normalisation statistics, env states, running episode sums, hidden states —
except its own PRNG key. Copying the env state too keeps everything the parent's parameters and
statistics were fitted to consistent (a normalised observation with its statistics, a hidden
state with its episode); keeping the key makes the child's trajectories its own from the next
step on. The top and the middle of the ranking are untouched.

**Explore (perturb).** A child starts from its parent's hyperparameters; each tuned field is
then, independently, resampled from its initial range with probability
``resample_probability`` (log-uniformly for lr and adam_eps, as in `sweep`), or else
multiplied by one of ``factors`` drawn uniformly and clipped to the range.

**Fitness is NaN-safe.** An agent that finished no episode in the interval, or diverged (a
non-finite loss or gradient, a skipped step, a gradient norm above ``divergence_grad_norm``),
ranks below every healthy agent and is never a parent; padding agents (sharding) take no part.

**Keys.** ``seed`` fixes everything: agent ``i`` trains with ``split(split(PRNGKey(seed))[0],
population)[i]``, the initial hyperparameters are drawn with ``numpy.random.default_rng(seed)``
and the exploit/explore draws of generation ``g`` use ``fold_in(split(PRNGKey(seed))[1], g)``.
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jaxtyping import Array, Float, Int, PRNGKeyArray

from ._chunks import RunFiles, run_chunks
from ._config import INIT_ONLY_FIELDS, TRACED_FIELDS, PPOConfig, static_field_names
from ._driver import RunOptions, drive
from ._engine import CompileClock, Engine, engine_for
from ._host_memory import check_pbt_memory
from ._ppo import Metrics, RunnerState, healthy
from ._progress import ProgressFn
from ._results import History, PBTResult
from ._search import LOG_UNIFORM_FIELDS, check_range, initial_population
from .envs import describe_env
from .rundir import write_pbt_run
from .rundir._format import config_from_json, config_to_json, read_json
from .rundir._pbt_files import checkpoint_like, empty_history
from .tracking import TrackedRun, Tracker
from .tracking._runs import pbt_agents, pbt_finished, run_name

EXPLOITS = ("truncation",)
EXPLORES = ("perturb",)


class PBTCarry(NamedTuple):
    """What the generation scan carries besides the agents: the PBT key and a counter."""

    key: PRNGKeyArray
    generation: Int[Array, ""]


class GenerationRecord(NamedTuple):
    """One exploit/explore step, per agent (leading axis: agent)."""

    fitness: Float[Array, " A"]  # -inf: unranked (no episode, diverged or padding)
    parents: Int[Array, " A"]  # whose state the agent continues from (itself if kept)
    hyperparameters: dict  # field -> (A,): the values used during the generation


@dataclasses.dataclass(frozen=True)
class PopulationStep:
    """Exploit (truncation) and explore (perturb/resample) across the agent axis.

    Hashable, so it keys the compiled generation program (`Engine.run_generations`).
    ``ranges``: ``(field, low, high, log_uniform)`` per tuned field.
    """

    ranges: tuple[tuple[str, float, float, bool], ...]
    fraction: float
    factors: tuple[float, ...]
    resample_probability: float
    divergence_grad_norm: float

    def num_replaced(self, population: int) -> int:
        """Agents replaced per step: ``fraction`` of the population, at least one."""
        return max(1, int(self.fraction * population))

    def __call__(self, state: RunnerState, hp: PPOConfig, metrics: Metrics, carry: PBTCarry, valid):
        fitness = jnp.where(
            jnp.asarray(valid), fitness_of(metrics, self.divergence_grad_norm), -jnp.inf
        )
        parents = self.select(jax.random.fold_in(carry.key, carry.generation), fitness, valid)
        record = GenerationRecord(fitness, parents, {n: getattr(hp, n) for n, *_ in self.ranges})
        new_hp = self.explore(jax.random.fold_in(carry.key, -1 - carry.generation), hp, parents)
        new_state = jax.tree.map(lambda x: x[parents], state)
        new_state = eqx.tree_at(lambda s: s.key, new_state, state.key)  # keep own stream
        return new_state, new_hp, PBTCarry(carry.key, carry.generation + 1), record

    def select(self, key: PRNGKeyArray, fitness: Float[Array, " A"], valid) -> Int[Array, " A"]:
        """Each agent's parent: an agent of the top ``fraction`` for the bottom ``fraction``
        (drawn uniformly among the top agents with a finite fitness; none: no copy), itself
        for everyone else. Ties rank by agent index."""
        n, size = int(np.sum(valid)), len(valid)
        k = self.num_replaced(n)
        index = jnp.arange(size)
        # Real agents first (padding last), then best fitness first, then lowest index.
        order = jnp.lexsort((index, -fitness, ~jnp.asarray(valid)))
        top, bottom = order[:k], order[n - k : n]
        usable = jnp.sum(jnp.isfinite(fitness[top]))  # sorted: the finite ones come first
        pick = jax.random.randint(key, (k,), 0, jnp.maximum(usable, 1))
        return index.at[bottom].set(jnp.where(usable > 0, top[pick], bottom))

    def explore(self, key: PRNGKeyArray, hp: PPOConfig, parents: Int[Array, " A"]) -> PPOConfig:
        """Children (``parents[i] != i``) take their parent's values, then perturb or resample
        each tuned field; everyone else keeps theirs."""
        size = parents.shape[0]
        child = parents != jnp.arange(size)
        factors = jnp.asarray(self.factors, jnp.float32)
        changes = {}
        for i, (name, low, high, log) in enumerate(self.ranges):
            k_factor, k_coin, k_fresh = jax.random.split(jax.random.fold_in(key, i), 3)
            own = getattr(hp, name)
            factor = factors[jax.random.randint(k_factor, (size,), 0, len(self.factors))]
            perturbed = jnp.clip(own[parents] * factor, low, high)
            fresh = _draw(k_fresh, low, high, log, size)
            resample = jax.random.uniform(k_coin, (size,)) < self.resample_probability
            value = jnp.where(resample, fresh, perturbed)
            changes[name] = jnp.where(child, value, own).astype(own.dtype)
        return hp.batched(**changes)


def _draw(key, low: float, high: float, log: bool, size: int) -> Float[Array, " A"]:
    if log:
        u = jax.random.uniform(key, (size,), minval=np.log(low), maxval=np.log(high))
        return jnp.clip(jnp.exp(u), low, high)
    return jax.random.uniform(key, (size,), minval=low, maxval=high)


def fitness_of(metrics: Metrics, divergence_grad_norm: float = 1e6) -> Float[Array, "*A"]:
    """Mean episode return over the updates of ``metrics`` (last axis), per agent; ``-inf``
    for an agent that finished no episode or diverged (ranks last, never poisons a sort)."""
    ret = jnp.asarray(metrics.episode_return)
    has = jnp.isfinite(ret)
    mean = jnp.sum(jnp.where(has, ret, 0.0), -1) / jnp.maximum(jnp.sum(has, -1), 1)
    ok = jnp.all(healthy(metrics, divergence_grad_norm), -1)
    return jnp.where(ok & jnp.any(has, -1), mean, -jnp.inf)


def pbt(
    cfg: PPOConfig,
    population: int,
    *,
    interval: int,
    exploit: str = "truncation",
    fraction: float = 0.25,
    explore: str = "perturb",
    factors: tuple[float, ...] = (0.8, 1.25),
    resample_probability: float = 0.25,
    seed: int = 0,
    divergence_grad_norm: float = 1e6,
    mesh: Mesh | None | bool = None,
    group_size: int | None = None,
    progress: ProgressFn | None = None,
    progress_every: int = 1,
    run_dir: str | Path | None = None,
    checkpoint_every: int | None = None,
    resume: bool = False,
    overwrite: bool = False,
    should_stop: Callable[[], bool] | None = None,
    stop_at: int | None = None,
    write_results: bool = True,
    env: Any = None,
    tracker: Tracker | Sequence[Tracker] | None = None,
    **ranges: tuple[float, float],
) -> PBTResult:
    """Train a population that tunes its own hyperparameters as it trains (module doc).

    Args:
        cfg: the base config; the tuned fields start from the given ranges.
        population: agents (at least 2).
        interval: updates per generation; after each (except the last) the population
            exploits and explores. ``interval`` ≥ the run's updates: no step happens (a
            random search over the initial ranges), with a warning.
        exploit: ``"truncation"``: the bottom ``fraction`` copies the top ``fraction``.
        fraction: in (0, 0.5].
        explore: ``"perturb"``: multiply by one of ``factors`` (each > 0) and clip to the
            range, or with ``resample_probability`` (in [0, 1]) draw afresh from the range.
        seed: fixes the agents' keys, the initial draws and every PBT draw.
        divergence_grad_norm: a gradient norm above this counts as diverged (as in `sweep`).
        mesh, group_size, progress, progress_every: as in `sweep` (the population may be
            sharded; the exploit step gathers across devices and gives the same result).
        run_dir, checkpoint_every: checkpoint every agent, the hyperparameters and the PBT
            key atomically into ``run_dir`` every ``checkpoint_every`` generations;
            ``resume`` continues from the newest intact checkpoint (bit for bit on CPU),
            ``overwrite`` replaces a run there; ``should_stop`` is polled after each chunk;
            ``stop_at`` stops at the first checkpoint at or past this many env steps per
            agent (a long run in sittings: `resume_pbt` goes on).
            A finished run's results are written there too (`write_pbt_run`: metrics,
            figures, summary and every agent's parameters), unless ``write_results=False``.
        env: your own environment (as in `make_train`): ``cfg.replace(env=env)``.
        tracker: log every agent as it trains (`purejaxppo.tracking.WandB`, `TensorBoard`,
            or a list), as in `sweep`, with each agent's hyperparameter schedule
            (``hp/<field>``); when the run finishes, the lineage table and (with
            ``run_dir``) the figures.
        **ranges: tuned traced field → ``(low, high)`` initial range and bounds (log-uniform
            for lr and adam_eps).

    Every argument is checked before anything compiles; a bad one is one line naming it.
    """
    if env is not None:
        cfg = cfg.replace(env=env)
    step = check_pbt_args(
        cfg, population, interval, exploit, fraction, explore, factors, resample_probability,
        divergence_grad_norm, ranges,
    )  # fmt: skip
    options = RunOptions(
        mesh=mesh, group_size=group_size, progress=progress, progress_every=progress_every,
        run_dir=run_dir, checkpoint_every=checkpoint_every, resume=resume, overwrite=overwrite,
        should_stop=should_stop, stop_at=stop_at, write_results=write_results, tracker=tracker,
    )  # fmt: skip
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool):
        raise ValueError(f"pbt(seed={seed!r}): need an int.")
    chunked = options.checked("pbt", unit="generations", auto=False)
    check_pbt_memory(cfg, population, ranges, chunked)
    trackers = options.trackers("pbt")
    updates = cfg.num_updates
    if interval >= updates:
        warnings.warn(
            f"pbt(interval={interval}): the run has {updates} updates, so no exploit step will "
            "happen (this is a random search over the initial ranges).",
            stacklevel=2,
        )
    generations = -(-updates // interval)
    keys, hp, pbt_key = initial_population(cfg, population, int(seed), ranges)

    def tracked_run() -> TrackedRun:
        where = None if run_dir is None else Path(run_dir)
        return TrackedRun("pbt", run_name(run_dir, "pbt"), pbt_agents(cfg, hp), where, resume)

    spec = {
        "config": config_to_json(cfg),
        "population": population,
        "interval": interval,
        "seed": int(seed),
        "group_size": group_size,
        "checkpoint_every": checkpoint_every,
        "step": json.loads(json.dumps(dataclasses.asdict(step))),  # tuples as JSON lists
    }
    if describe_env(cfg) is not None:  # an own environment, described (names: no key, as
        spec["env"] = describe_env(cfg)  # before; checkpoints are stamped with the spec)

    def train(files: RunFiles | None, progress, recorder) -> PBTResult:
        engine = engine_for(cfg, **options.engine_options(population, progress, trackers))
        clock = CompileClock()
        state, history = _run(
            engine, step, keys, hp, pbt_key, interval, files,
            every=checkpoint_every if chunked else generations, should_stop=should_stop,
            stop_at=stop_at,
        )  # fmt: skip
        compile_s, run_s = clock.seconds()
        return PBTResult(
            metrics=history.metrics,
            state=state,
            hyperparameters=history.hyperparameters,
            lineage=history.lineage,
            fitness=history.fitness,
            config=cfg,
            interval=interval,
            finished=int(history.done) == generations,
            timings={"compile_s": compile_s, "run_s": run_s},
        )

    return drive(
        "pbt", options, chunked=chunked, trackers=trackers, spec=spec, tracked_run=tracked_run,
        train=train, write=lambda result: write_pbt_run(run_dir, result, result.timings),
        finished=pbt_finished,
    )  # fmt: skip


def _run(
    engine: Engine, step: PopulationStep, keys, hp, pbt_key, interval: int,
    files: RunFiles | None, *, every: int, should_stop=None, stop_at=None,
) -> tuple[RunnerState, History]:  # fmt: skip
    """Generations in chunks of ``every`` (`run_chunks`; one program per chunk size), from
    the newest intact checkpoint of ``files`` when there is one. Returns the final state and
    the `History`."""
    n, updates = len(keys), engine.cfg.num_updates
    generations = -(-updates // interval)
    tail = updates - (generations - 1) * interval  # the last generation: no step after it
    names = [name for name, *_ in step.ranges]
    history = empty_history(engine, keys, hp, names, generations)
    loaded = None
    if files is not None:
        loaded = files.newest(lambda: checkpoint_like(engine, keys, hp, pbt_key, names, history))
    if loaded is not None:
        state, values, pbt_key, history = loaded
        history = jax.tree.map(np.array, history)  # writable copies
        hp = hp.batched(**values)
    else:
        state = engine.init(keys, hp)

    def advance(carry, done, size):
        state, hp, history = carry
        if generations == 1:  # no step at all: the plain run of the initial population
            state, chunk = engine.run(state, hp, tail)
            records, count, last = None, 0, True
        else:
            count = min(size, generations - 1 - done)  # generations with a step after them
            last = done + count == generations - 1  # then the last one joins this program
            carry = PBTCarry(jnp.asarray(pbt_key), jnp.asarray(done, jnp.int32))
            state, hp_after, _, chunk, records = engine.run_generations(
                state, hp, carry, interval, count, step, tail if last else 0
            )
        chunk = engine.strip(chunk, n)
        first = done * interval
        if records is not None:
            records = engine.strip(records, n)
            span = slice(first, first + count * interval)
            for k in names:
                history.hyperparameters[k][:, span] = np.repeat(
                    records.hyperparameters[k], interval, axis=1
                )
            history.lineage[:, done + 1 : done + 1 + count] = records.parents
            history.fitness[:, done : done + count] = records.fitness
            # host values without the padding: the next chunk pads and places them again
            hp = hp.batched(**{k: engine.strip(getattr(hp_after, k), n) for k in names})
        if last:  # its values, and its fitness over the run's final interval
            span = slice(first + count * interval, updates)
            for k in names:
                history.hyperparameters[k][:, span] = np.asarray(getattr(hp, k))[:, None]
            final = jax.tree.map(lambda x: x[:, -interval:], chunk)
            history.fitness[:, -1] = fitness_of(final, step.divergence_grad_norm)
        span = slice(first, first + chunk.episode_return.shape[1])
        for m, c in zip(jax.tree.leaves(history.metrics), jax.tree.leaves(chunk), strict=True):
            m[:, span] = c  # every series, the env's episode statistics included
        if done == 0:
            history.lineage[:, 0] = np.arange(n)
        history = history._replace(done=np.asarray(done + count + last, np.int32))
        return (state, hp, history), count + last

    def checkpoint(carry):  # every process gathers (a collective); `RunFiles.save` writes
        state, hp, history = carry
        values = {k: np.asarray(getattr(hp, k)) for k in names}
        return engine.strip(state, n), values, np.asarray(pbt_key), history

    out = run_chunks(
        (state, hp, history), done=int(history.done), total=generations, every=every,
        advance=advance, files=files, checkpoint=checkpoint, should_stop=should_stop,
        stop_at=stop_at, env_steps=lambda d: min(d * interval, updates) * engine.cfg.batch_size,
    )  # fmt: skip
    state, _, history = out.carry
    return engine.strip(state, n), history


def resume_pbt(
    run_dir: str | Path,
    *,
    mesh: Mesh | None | bool = None,
    progress: ProgressFn | None = None,
    progress_every: int = 1,
    should_stop: Callable[[], bool] | None = None,
    stop_at: int | None = None,
    write_results: bool = True,
    env: Any = None,
    tracker: Tracker | Sequence[Tracker] | None = None,
) -> PBTResult:
    """Continue the checkpointed PBT run in ``run_dir`` (its ``pbt.json`` gives the rest).

    The result equals the uninterrupted run's, bit for bit on CPU (tested). A run of an
    environment object needs it again as ``env`` (as for `resume_sweep`); ``tracker``
    continues its tracked runs.
    """
    spec = read_json(Path(run_dir) / "pbt.json", "pbt.json")
    step = spec["step"]
    return pbt(
        config_from_json(spec["config"]),
        spec["population"],
        interval=spec["interval"],
        fraction=step["fraction"],
        factors=tuple(step["factors"]),
        resample_probability=step["resample_probability"],
        seed=spec["seed"],
        divergence_grad_norm=step["divergence_grad_norm"],
        group_size=spec["group_size"],
        mesh=mesh,
        progress=progress,
        progress_every=progress_every,
        run_dir=run_dir,
        checkpoint_every=spec["checkpoint_every"],
        resume=True,
        should_stop=should_stop,
        stop_at=stop_at,
        write_results=write_results,
        env=env,
        tracker=tracker,
        **{name: (low, high) for name, low, high, _ in step["ranges"]},
    )


def check_pbt_args(
    cfg, population, interval, exploit, fraction, explore, factors, resample_probability,
    divergence_grad_norm, ranges,
) -> PopulationStep:  # fmt: skip
    """Refuse bad PBT arguments in one line each, before anything compiles; returns the
    population step they describe."""

    def number(x):
        return isinstance(x, numbers.Real) and not isinstance(x, bool) and np.isfinite(x)

    if not isinstance(population, numbers.Integral) or isinstance(population, bool):
        raise ValueError(f"pbt(population={population!r}): need an int of at least 2.")
    if population < 2:
        raise ValueError(f"pbt(population={population}): need at least 2 agents to exploit.")
    if not isinstance(interval, numbers.Integral) or isinstance(interval, bool) or interval < 1:
        raise ValueError(f"pbt(interval={interval!r}): need a positive int (updates per step).")
    if exploit not in EXPLOITS:
        raise ValueError(f"pbt(exploit={exploit!r}): supported: {list(EXPLOITS)}.")
    if explore not in EXPLORES:
        raise ValueError(f"pbt(explore={explore!r}): supported: {list(EXPLORES)}.")
    if not number(fraction) or not 0 < fraction <= 0.5:
        raise ValueError(f"pbt(fraction={fraction!r}): need 0 < fraction <= 0.5.")
    try:
        factors = tuple(float(f) for f in factors)
    except (TypeError, ValueError):
        raise ValueError(f"pbt(factors={factors!r}): need a list of positive numbers.") from None
    if not factors or not all(np.isfinite(f) and f > 0 for f in factors):
        raise ValueError(f"pbt(factors={factors!r}): need one or more numbers > 0.")
    if not number(resample_probability) or not 0 <= resample_probability <= 1:
        raise ValueError(
            f"pbt(resample_probability={resample_probability!r}): need a number in [0, 1]."
        )
    if not number(divergence_grad_norm) or divergence_grad_norm <= 0:
        raise ValueError(f"pbt(divergence_grad_norm={divergence_grad_norm!r}): need a number > 0.")
    if not ranges:
        raise ValueError("pbt: give at least one hyperparameter range, e.g. lr=(1e-5, 1e-2).")
    checked = []
    for name, r in ranges.items():
        if name in static_field_names():
            raise ValueError(
                f"pbt: {name} is static (it fixes shapes) and cannot change during a run; "
                f"tunable fields: {[f for f in TRACED_FIELDS if f not in INIT_ONLY_FIELDS]}."
            )
        if name in INIT_ONLY_FIELDS:
            raise ValueError(f"pbt: {name} only sets the initial state; PBT cannot tune it.")
        if name not in TRACED_FIELDS:
            raise ValueError(
                f"pbt: unknown hyperparameter {name!r}; tunable fields: "
                f"{[f for f in TRACED_FIELDS if f not in INIT_ONLY_FIELDS]}."
            )
        if name == "max_grad_norm" and cfg.max_grad_norm is None:
            raise ValueError("pbt: max_grad_norm is None in the config (no clipping); set it.")
        ok = isinstance(r, tuple | list | np.ndarray) and len(r) == 2 and all(number(v) for v in r)
        if not ok:
            raise ValueError(f"pbt: {name}={r!r} must be a (low, high) range of numbers.")
        low, high = (float(v) for v in r)
        check_range(cfg, "pbt", name, low, high)
        checked.append((name, low, high, name in LOG_UNIFORM_FIELDS))
    return PopulationStep(
        ranges=tuple(checked),
        fraction=float(fraction),
        factors=factors,
        resample_probability=float(resample_probability),
        divergence_grad_norm=float(divergence_grad_norm),
    )
