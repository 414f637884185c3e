"""``purejaxppo eval RUN_DIR``: every agent of a finished run on fresh episodes, and a GIF."""

from __future__ import annotations

import math
from pathlib import Path

from ._flags import EvalCmd
from ._progress import log


def evaluate_run(cmd: EvalCmd) -> int:
    """``purejaxppo eval RUN_DIR``: every agent of a sweep or a PBT run (a PBT agent with its
    final hyperparameters), on fresh episodes."""
    import jax
    import numpy as np

    from .._axes import coords_of, flat_index, split_program, static_setting
    from .._backend import describe_place, ran_on
    from .._distributions import policy_distribution
    from .._evaluate import evaluate, has_success, policy_of
    from .._figures import write_gif
    from ..envs import make_env
    from ..rundir import load_agents, read_run
    from ..rundir._write import place_line

    if cmd.episodes < 1:
        raise ValueError(f"--episodes {cmd.episodes}: need at least one.")
    meta = read_run(cmd.run_dir)  # an unfinished run: one line saying how to finish it
    cfg, axes, values = meta["config"], meta["axes"], meta.get("values", {})
    n = math.prod(len(v) for v in axes.values())
    if cmd.agent is not None and not 0 <= cmd.agent < n:
        raise ValueError(f"--agent {cmd.agent}: this run has agents 0..{n - 1}.")
    agents = load_agents(cmd.run_dir)
    key = jax.random.PRNGKey(cmd.seed)
    per_program = n // len(agents)
    mode = "sampled" if cmd.sampled else "greedy"
    print(f"trained on {place_line(meta)}; evaluating on {describe_place(ran_on())}")
    print(f"evaluating {n} agent(s) × {cmd.episodes} fresh {mode} episodes ...", flush=True)
    results = []  # flat agent order: row-major over the axes, static axes first
    for p, norm in agents:
        index = flat_index(axes, len(results))
        ev = evaluate(cfg.replace(**static_setting(axes, index)), p, key, cmd.episodes,
                      greedy=not cmd.sampled, obs_norm=norm)  # fmt: skip
        flat = jax.tree.map(lambda x: np.asarray(x).reshape(-1, cmd.episodes), ev)
        results += [jax.tree.map(lambda x, i=i: x[i], flat) for i in range(per_program)]
    chosen = range(n) if cmd.agent is None else [cmd.agent]
    success = has_success(cfg)  # else "n/a": the env defines no success
    # hyperparameters that vary per agent without being an axis (random search, PBT)
    shown = [k for k in values if k not in axes]
    per_agent = {k: np.asarray(values[k], np.float64) for k in shown}  # axes before "seed"
    named = [k for k in axes if k != "agent"]  # a PBT agent's coordinate is its number
    print(" | ".join(["agent", *named, *shown, "return", "success", "length"]))
    for i in chosen:
        r = results[i]
        index = flat_index(axes, i)
        coords = [c for k, c in coords_of(axes, index).items() if k != "agent"]
        hp = [f"{v[index[: v.ndim]]:.4g}" for v in per_agent.values()]
        print(" | ".join([str(i), *[str(c) for c in coords], *hp,
                          f"{r.episode_return.mean():.3f}",
                          f"{r.success.mean():.3f}" if success else "n/a",
                          f"{r.episode_length.mean():.1f}"]))  # fmt: skip
    if cmd.gif:
        i = cmd.agent
        if i is None:
            i = int(np.argmax([r.episode_return.mean() for r in results]))
        index = flat_index(axes, i)
        program, local = split_program(axes, index)
        path = Path(cmd.run_dir) / cmd.gif  # a relative name lands in the run directory
        from ..rundir._lock import claim

        c = cfg.replace(**static_setting(axes, index))
        params, norm = agents[program]
        policy = policy_of(params, local, dist=policy_distribution(c, make_env(c)), obs_norm=norm)
        with claim(cmd.run_dir, "results"):  # never while a run writes the directory
            frames = write_gif(path, c, policy, jax.random.PRNGKey(cmd.seed + 1), log=log)
        print(f"wrote {path}: agent {i}, {frames} frames")
    return 0
