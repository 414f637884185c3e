"""What a sweep or a PBT population trains: its seeds, its hyperparameter draws, and the
checks that refuse a bad one in about a second, before anything is written or compiled."""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Sequence

import jax
import numpy as np
from jaxtyping import PRNGKeyArray

from ._agents import batched
from ._config import TRACED_FIELDS, PPOConfig, static_field_names
from ._host_memory import check_host_memory

LOG_UNIFORM_FIELDS = ("lr", "adam_eps")  # drawn log-uniformly (they span decades)


def sample_ranges(ranges: dict, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``n`` draws of each field from its ``(low, high)`` range, log-uniform for
    `LOG_UNIFORM_FIELDS` and uniform otherwise; fields are drawn in the order given (so the
    same ``rng`` seed gives the same values). Random search and PBT's first population."""
    draws = {}
    for name, (low, high) in ranges.items():
        if name in LOG_UNIFORM_FIELDS:
            draws[name] = np.exp(rng.uniform(np.log(low), np.log(high), n))
        else:
            draws[name] = rng.uniform(low, high, n)
    return draws


def hyperparameter_values(
    search: str, traced_axes: dict, num_samples: int | None, sample_seed: int
) -> tuple[dict[str, np.ndarray], dict[str, list]]:
    """A sweep's traced values (field -> array over its hyperparameter axes) and those axes:
    the grid of the given lists, or ``num_samples`` draws (`sample_ranges`) on one axis
    ``"sample"``."""
    if search == "grid":
        grids = np.meshgrid(
            *[np.asarray(v, np.float64) for v in traced_axes.values()], indexing="ij"
        )
        values = dict(zip(traced_axes, grids, strict=True))
        return values, {n: list(v) for n, v in traced_axes.items()}
    rng = np.random.default_rng(sample_seed)
    return sample_ranges(traced_axes, num_samples, rng), {"sample": list(range(num_samples))}


def seed_list(seeds) -> list[int]:
    """``seeds`` as a list: a count ``N`` means ``0 … N-1``; a list of ints is kept."""
    if isinstance(seeds, numbers.Integral) and not isinstance(seeds, bool):
        if seeds < 1:
            raise ValueError(f"sweep(seeds={seeds}): need at least one seed.")
        return list(range(int(seeds)))
    seeds = list(seeds)
    if not seeds or not all(isinstance(s, numbers.Integral) for s in seeds):
        raise ValueError(f"sweep(seeds={seeds!r}): give a count or a non-empty list of ints.")
    return [int(s) for s in seeds]


def check_sweep_args(
    cfg: PPOConfig,
    seeds: int | Sequence[int],
    search: str,
    num_samples: int | None,
    axes: dict,
    chunked: bool,
) -> int:
    """Every argument of a sweep that can be checked without compiling, and whether its
    agents' host-side arrays fit in memory: one line naming the argument, in about a second
    even for a count far too large (no per-agent list is built first). Returns the number of
    agents. The CLI calls it before it writes anything."""
    if search not in ("grid", "random"):
        raise ValueError(f"sweep(search={search!r}): use 'grid' or 'random'.")
    if search == "random":
        bad = not isinstance(num_samples, numbers.Integral) or isinstance(num_samples, bool)
        if bad or num_samples < 1:
            raise ValueError(
                f"sweep(search='random'): num_samples={num_samples!r}; give a positive number "
                "of samples (--num-samples N)."
            )
    elif num_samples is not None:
        raise ValueError(
            f"sweep(num_samples={num_samples!r}): it applies to search='random' (--search "
            "random); a grid sweep trains every combination of the given lists."
        )
    check_axes(cfg, axes, search)
    if isinstance(seeds, numbers.Integral) and not isinstance(seeds, bool):
        if seeds < 1:
            raise ValueError(f"sweep(seeds={seeds}): need at least one seed.")
        num_seeds = int(seeds)
    else:
        num_seeds = len(seed_list(seeds))
    traced = {k: v for k, v in axes.items() if k not in static_field_names()}
    settings = num_samples if search == "random" else _count(traced)
    num_agents = num_seeds * settings
    check_host_memory(static_bases(cfg, axes), num_agents, chunked)
    return num_agents


def static_bases(cfg: PPOConfig, axes: dict) -> list[PPOConfig]:
    """One config per combination of the swept static fields (one program each)."""
    static = {k: list(v) for k, v in axes.items() if k in static_field_names()}
    combos = list(itertools.product(*static.values())) or [()]
    return [cfg.replace(**dict(zip(static, c, strict=True))) for c in combos]


def _count(hyper_axes: dict) -> int:
    return int(np.prod([len(v) for v in hyper_axes.values()])) if hyper_axes else 1


def check_axes(cfg: PPOConfig, axes: dict, search: str) -> None:
    """Refuse a bad sweep axis (unknown field, empty, not numbers, a value the config
    refuses, a random range given high to low) before anything compiles."""
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
            if search == "random":
                if len(vals) != 2:
                    raise ValueError(f"sweep(search='random'): {name} must be a (low, high) range.")
                check_range(cfg, "sweep(search='random')", name, *vals)
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


def check_range(cfg: PPOConfig, who: str, name: str, low: float, high: float) -> None:
    """Refuse a search range given high to low, or whose ends the config refuses (one line
    naming ``who``'s field)."""
    low, high = float(low), float(high)
    if not low < high:
        raise ValueError(
            f"{who}: {name}=({low:g}, {high:g}) must be given low to high, e.g. "
            f"({min(low, high):g}, {max(low, high):g})."
        )
    for v in (low, high):  # both ends must make a valid config
        cfg.replace(**{name: v})


def initial_population(
    cfg: PPOConfig, population: int, seed: int, ranges: dict
) -> tuple[PRNGKeyArray, PPOConfig, PRNGKeyArray]:
    """The agents' keys and initial hyperparameters, and the PBT key (see the module doc)."""
    agents_key, pbt_key = jax.random.split(jax.random.PRNGKey(seed))
    keys = np.asarray(jax.random.split(agents_key, population))
    rng = np.random.default_rng(seed)
    values = sample_ranges(ranges, population, rng)
    hp = batched(cfg.traced(), population)
    return keys, hp.batched(**{k: v.astype(np.float32) for k, v in values.items()}), pbt_key
