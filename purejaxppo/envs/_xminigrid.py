"""XLand-MiniGrid by name (``env="xminigrid/<registered name>"``;
``pip install purejaxppo[xminigrid]``): its MiniGrid ports, and its XLand envs with one of
its ruleset benchmarks already on disk.

An XLand env has no goal of its own (its default ruleset is empty): it is named with a
benchmark, ``xminigrid/XLand-MiniGrid-R1-9x9@trivial-21k``, and each episode then draws one
of the benchmark's rulesets at random (the goal is not in the observation, as in
XLand-MiniGrid's own baselines), or ``...@trivial-21k#17`` keeps ruleset 17 for every
episode (one task). XLand-MiniGrid downloads a benchmark the first time it is loaded; here
nothing downloads: the file must already be in its data directory
(``xminigrid.benchmarks.DATA_PATH``: ``~/.xland_minigrid``, or ``$XLAND_MINIGRID_DATA``),
else the name is refused in one line saying which file and how to get it.
"""

from __future__ import annotations

import functools
import os
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Array, PRNGKeyArray

from ._base import Env, ended_step, select_tree

PREFIX = "xminigrid/"
XLAND = "XLand-MiniGrid-"
#: ``<XLand env>@<benchmark>``: the benchmark whose rulesets its episodes draw from;
#: ``...#<id>``: one ruleset of it, for every episode.
BENCHMARK, RULESET = "@", "#"
#: XLand-MiniGrid's step types (``xminigrid.types.StepType``): the last step of an episode.
LAST = 2


def registered_names() -> list[str]:
    """XLand-MiniGrid's registered environments (an ImportError without the extra)."""
    import xminigrid

    return list(xminigrid.registered_environments())


def base_name(name: str) -> str:
    """The registered name in ``name`` (without ``@<benchmark>[#<ruleset>]``)."""
    return name.partition(BENCHMARK)[0]


def _parts(name: str) -> tuple[str, str | None, str | None]:
    """``name`` as (registered name, benchmark or None, ruleset id or None)."""
    base, _, rest = name.partition(BENCHMARK)
    if not rest:
        return base, None, None
    bench, sep, ruleset = rest.partition(RULESET)
    return base, bench, ruleset if sep else None


def benchmark_path(bench: str) -> str:
    """Where XLand-MiniGrid keeps (and would download) benchmark ``bench``'s file."""
    from xminigrid import benchmarks

    return os.path.join(benchmarks.DATA_PATH, benchmarks.NAME2HFFILENAME[bench])


@functools.lru_cache(maxsize=2)
def _load(path: str, mtime: float):
    """The benchmark in ``path`` (read once per file version: the 1M-ruleset ones take
    seconds)."""
    from xminigrid.benchmarks import load_benchmark_from_path

    return load_benchmark_from_path(path)


def load(bench: str):
    path = benchmark_path(bench)
    return _load(path, os.path.getmtime(path))


def refusal(name: str) -> str | None:
    """Why ``name`` (its registered part checked) cannot be trained; None if it can."""
    from xminigrid import benchmarks

    base, bench, ruleset = _parts(name)
    known = ", ".join(benchmarks.registered_benchmarks())
    example = f"{PREFIX}{base}{BENCHMARK}trivial-21k"
    if not base.startswith(XLAND):
        if bench is not None:
            return f"a ruleset benchmark ({BENCHMARK}{bench}) applies to XLand envs only."
        return None
    if bench is None:
        return (
            f"XLand envs have no goal of their own: name one of XLand-MiniGrid's ruleset "
            f"benchmarks ({known}) after {BENCHMARK!r}, e.g. {example}, with its file "
            f"already in {benchmarks.DATA_PATH} (nothing is downloaded here)."
        )
    if bench not in benchmarks.NAME2HFFILENAME:
        return f"no ruleset benchmark {bench!r}; XLand-MiniGrid has {known}."
    path = benchmark_path(bench)
    if not os.path.exists(path):
        return (
            f"the ruleset benchmark {bench!r} is not on disk ({path} is missing) and nothing "
            f'is downloaded here: on a machine with network run python -c "import '
            f"xminigrid; xminigrid.load_benchmark('{bench}')\" and copy the file there (or "
            "set XLAND_MINIGRID_DATA to its directory)."
        )
    try:  # read here, once (cached for the env): a damaged file is one line, not a traceback
        count = load(bench).num_rulesets()
    except Exception as e:  # bz2, pickle or key errors: whatever the file's damage raises
        return (
            f"the ruleset benchmark file {path} cannot be read ({type(e).__name__}: "
            f"{' '.join(str(e).split())[:120]}); fetch it again."
        )
    if ruleset is not None:
        if not ruleset.isdigit() or int(ruleset) >= count:
            return (
                f"ruleset {ruleset!r} of {bench!r}: give a number from 0 to {count - 1} "
                f"after {RULESET!r}, or none to draw one per episode."
            )
    return None


class XMiniGridState(NamedTuple):
    timestep: Any  # XLand-MiniGrid's TimeStep (its state, step type, reward, discount, obs)
    key: PRNGKeyArray  # for the next episode's reset


class XMiniGridEnv(Env):
    """An XLand-MiniGrid environment: its egocentric view through the conv torso, its time
    limit (``max_steps`` of its params, or ``time_limit``) as a truncation.

    * **Observations:** the agent's view, V×V cells of two uint8 channels (tile, colour),
      given to the torso as 2×V×V.
    * **Endings.** XLand-MiniGrid marks an episode's last step ``LAST``, with discount 0 for a
      termination (the goal reached) and 1 for the time limit, which then bootstraps from
      V(final observation).
    * **Success:** it pays ``1 - 0.9 * steps / max_steps`` on reaching the goal and nothing
      otherwise, so any positive return is a solved episode (at least 0.1 at the last step;
      `success_return` is set below that).
    * **XLand rulesets** (``<name>@<benchmark>``): each reset draws one of the benchmark's
      rulesets (its goal, rules and objects), uniformly; XLand-MiniGrid keeps them in the
      episode's state, so steps need no more. ``#<id>`` fixes one. The benchmark's arrays
      are constants of the compiled program.
    """

    can_truncate = True
    can_draw = True
    success_return = 0.05

    def __init__(self, name: str, time_limit: int | None = None):
        import xminigrid

        self.name = name
        base, bench, ruleset = _parts(name)
        self.env, params = xminigrid.make(base)
        if time_limit is not None:
            params = params.replace(max_steps=int(time_limit))
        self.benchmark = None
        if bench is not None:
            benchmark = jax.tree.map(jnp.asarray, load(bench))
            if ruleset is None:
                self.benchmark = benchmark
                params = params.replace(ruleset=benchmark.get_ruleset(0))  # for the shapes
            else:
                params = params.replace(ruleset=benchmark.get_ruleset(int(ruleset)))
        self.params = params
        self.max_episode_steps = int(params.max_steps)
        self.num_actions = int(self.env.num_actions(params))
        v, _, c = self.env.observation_shape(params)
        self.obs_shape, self.obs_dtype = (c, v, v), jnp.uint8

    def encode(self, obs) -> Array:
        return jnp.moveaxis(obs, -1, 0).astype(self.obs_dtype)

    def frame(self, state) -> np.ndarray:
        """XLand-MiniGrid's own drawing of the grid (its agent's view highlighted)."""
        from xminigrid.rendering.rgb_render import render

        inner = jax.device_get(state.timestep.state)
        return render(np.asarray(inner.grid), inner.agent, int(self.params.view_size))

    def _reset(self, key: PRNGKeyArray):
        """XLand-MiniGrid's reset, on a ruleset drawn from the benchmark if there is one."""
        params = self.params
        if self.benchmark is not None:
            key, pick = jax.random.split(key)
            params = params.replace(ruleset=self.benchmark.sample_ruleset(pick))
        return self.env.reset(params, key)

    def reset(self, key):
        key, reset_key = jax.random.split(key)
        timestep = self._reset(reset_key)
        mask = jnp.ones(self.num_actions, bool)
        return XMiniGridState(timestep, key), self.encode(timestep.observation), mask

    def step(self, state, action):
        nxt = self.env.step(self.params, state.timestep, action)
        done = nxt.step_type == LAST
        terminated = done & (nxt.discount == 0)
        key, reset_key = jax.random.split(state.key)
        first = self._reset(reset_key)
        return XMiniGridState(select_tree(done, first, nxt), key), ended_step(
            self.num_actions, nxt.reward, terminated, done, self.encode(first.observation),
            self.encode(nxt.observation),
        )  # fmt: skip


ENV = XMiniGridEnv  # what the registry builds for this suite's names
