"""Writing a run directory: everything a CLI run (or `write_run`) leaves behind.

    config.json     the full config, the swept axes and values, seeds, timings
    metrics.npz     every per-update metric, shape (*axes, update), with labelled axes
    metrics.csv     the same in tidy/long form: one row per agent × update (pandas-ready)
    params.eqx      trained parameters of every agent (Equinox serialisation)
    curves.png      learning curves: mean over seeds, 95 % bootstrap band, one line per setting
    episode_stats.png  the env's per-episode statistics (e.g. Craftax's achievements), if any
    summary.md/csv  per setting: final return, IQM with 95 % bootstrap CI, success rate,
                    steps/s, compile and run seconds; diverged agents named
    agent.gif       the best agent playing one episode (Jumanji's or Brax's own renderer)
    sweep.json, ckpt-*.eqx, .lock   a chunked run's description, checkpoints and lock

``config.json`` says ``"finished": true`` only once every other file is written;
``params.eqx`` carries its length and SHA-256 and is refused if either does not match.

The readers (`read_run`, `load_policy`, `describe`) are in `_read`.
"""

from __future__ import annotations

import csv
import io
import json
import warnings
from collections.abc import Callable
from pathlib import Path

import equinox as eqx
import jax
import numpy as np

from .._axes import split_program, static_setting
from .._backend import describe_place, ran_on
from .._config import PPOConfig, static_field_names
from .._distributions import policy_distribution
from .._evaluate import Policy, evaluate, has_success
from .._figures import plot_curves, plot_episode_stats, write_gif
from .._results import SweepResult
from ..envs import can_render, describe_env, make_env, why_not_drawn
from ..stats import final_scores
from ._format import (
    PARAMS_FORMAT,
    atomic_write,
    config_to_json,
    params_name,
    read_json,
    write_verified,
)
from ._lock import RunDirError, RunDirWarning, claim

FILES = ("config.json", "metrics.npz", "metrics.csv", "params.eqx", "curves.png", "summary.md")


def write_run(
    run_dir: str | Path,
    result: SweepResult,
    *,
    timings: dict | None = None,
    eval_episodes: int = 32,
    gif: bool = True,
    eval_seed: int = 10_000,
    overwrite: bool = False,
    log: Callable[[str], None] | None = None,
) -> dict:
    """Write the run directory for a `SweepResult` (a single run is a 1-seed sweep).

    ``timings`` default to the result's own (compile and run seconds of each program).
    ``eval_episodes`` fresh greedy episodes per agent give the success rate, for envs that
    define success (0: skip it). The directory is locked while it is written; one that
    already holds written results is refused unless ``overwrite`` (a checkpointed sweep's
    own directory is fine). ``config.json`` says ``"finished": true`` only once every other
    file is written. ``log`` gets a line before each slow stage (evaluation, the GIF), e.g.
    ``print``. Returns the summary rows.
    """
    if not isinstance(eval_episodes, int) or isinstance(eval_episodes, bool) or eval_episodes < 0:
        raise ValueError(f"eval_episodes={eval_episodes!r}: use 0 (skip) or a positive int.")
    run_dir = Path(run_dir)
    with claim(run_dir, "results"):
        _check_results_target(run_dir, result, overwrite)
        timings = dict(result.timings if timings is None else timings)
        say = log or (lambda _: None)
        return _write_run(run_dir, result, timings, eval_episodes, gif, eval_seed, say)


def _write_run(run_dir: Path, result: SweepResult, timings, eval_episodes, gif, eval_seed, say):
    cfg = result.config
    axes = {k: [_json(x) for x in v] for k, v in result.axes.items()}
    num_agents = int(np.prod(result.shape))
    meta = {
        "kind": "sweep" if set(result.axes) - {"seed"} else "train",
        "config": resolved_config_json(cfg),
        "axes": axes,
        "values": {k: np.asarray(v).tolist() for k, v in result.values.items()},
        "num_agents": num_agents,
        "finished": False,  # until every file below is written
        "timings": timings,
        **where_it_ran(run_dir),
    }
    if describe_env(cfg) is not None:  # an own environment, described (read_run compares)
        meta["env"] = describe_env(cfg)
    atomic_write(run_dir / "config.json", json.dumps(meta, indent=1).encode())
    _write_metrics(run_dir, result)
    params = _params_by_program(result)
    write_params(run_dir, params, meta["config"], axes)

    skipped = []  # what a run of this env cannot have: said once, not left blank
    if eval_episodes and not has_success(cfg):
        skipped.append("no success rate (the env defines none)")
    if gif and not can_render(cfg):
        skipped.append(f"no agent.gif ({why_not_drawn(cfg)})")
    if skipped:
        say(f"{cfg.env}: " + " and ".join(skipped) + ".")
    success = _success(result, params, eval_episodes, eval_seed, say)
    rows = result.summary()
    _add_run_columns(rows, result, success, timings)
    _write_summary(run_dir, rows, result, meta)
    curves = _curves(result)
    steps = env_steps(result)
    label = f"{cfg.env} {cfg.maze_spec or ''}"
    plot_curves(run_dir / "curves.png", curves, _curve_steps(result, steps), label)
    if result.metrics.episode_stats:  # e.g. Craftax's achievements
        stats = _episode_stats(result)
        plot_episode_stats(run_dir / "episode_stats.png", stats, _curve_steps(result, steps), label)
    if gif and can_render(cfg):
        best = _best_agent(result)
        if best is not None:
            agent = result.agent_at(best)
            dist = policy_distribution(agent.config, make_env(agent.config))
            policy = Policy(agent.state.params, dist, agent.state.obs_norm)
            key = jax.random.PRNGKey(eval_seed + 1)
            try:
                write_gif(run_dir / "agent.gif", agent.config, policy, key, log=say)
            except Exception as e:  # a renderer without its graphics stack: no GIF, say why
                warnings.warn(
                    f"no agent.gif: the renderer failed ({type(e).__name__}: {e}).",
                    RunDirWarning,
                    stacklevel=2,
                )
    meta["finished"] = result.finished
    atomic_write(run_dir / "config.json", json.dumps(meta, indent=1).encode())
    return rows


def write_params(run_dir: Path, params: list[tuple], config: dict, axes: dict) -> None:
    """``params.eqx`` (``params-<i>.eqx`` per program): each program's stacked networks and,
    if any, their frozen observation statistics, with a verified header (`write_verified`)."""
    for i, p in enumerate(params):
        buf = io.BytesIO()
        eqx.tree_serialise_leaves(buf, p)
        header = {"format": PARAMS_FORMAT, "config": config, "axes": axes}
        write_verified(run_dir / params_name(i, len(params)), header, buf.getvalue())


def env_steps(result: SweepResult) -> np.ndarray:
    """Env steps per agent after each update, per program: shape ``(*static axes, update)``
    (static axes such as ``num_envs`` change the batch; -1 past a program's last update)."""
    updates = result.metrics.episode_return.shape[-1]
    static = [k for k in result.axes if k in static_field_names()]
    out = np.full((*[len(result.axes[k]) for k in static], updates), -1, np.int64)
    for index in np.ndindex(*out.shape[:-1]):
        _, c = _program_of(result, index)
        out[index][: c.num_updates] = (np.arange(c.num_updates) + 1) * c.batch_size
    return out


def _program_of(result: SweepResult, index: tuple[int, ...]) -> tuple[int, PPOConfig]:
    """The program (static setting) holding the agents at a leading ``index``, and its config."""
    full = (*index, *[0] * (len(result.axes) - len(index)))
    program, _ = split_program(result.axes, full)
    return program, result.config.replace(**static_setting(result.axes, full))


def steps_trained(result: SweepResult) -> int:
    """Env steps of every agent together trained by the call that made ``result`` (after a
    resume: since the resume), each static setting with its own batch."""
    static = [k for k in result.axes if k in static_field_names()]
    programs = result.timings.get("programs") or [{}]
    agents = int(np.prod(result.shape[len(static) :]))
    total = 0
    for i, combo in enumerate(np.ndindex(*[len(result.axes[k]) for k in static])):
        _, c = _program_of(result, combo)
        updates = programs[i].get("updates_run", c.num_updates) if i < len(programs) else 0
        total += agents * updates * c.batch_size
    return total


def _check_results_target(run_dir: Path, result: SweepResult, overwrite: bool) -> None:
    """A run's results may be (re)written into its own checkpointed directory; any other
    directory that holds a written run needs ``overwrite``."""
    if overwrite:
        return
    sweep_json = run_dir / "sweep.json"
    own = False
    if sweep_json.exists():
        spec = read_json(sweep_json, "sweep.json")
        if spec.get("config") != config_to_json(result.config):
            raise RunDirError(
                f"{run_dir} holds the checkpoints of another run (its sweep.json has another "
                "config); write these results elsewhere."
            )
        own = True
    if (run_dir / "config.json").exists() and not own:
        raise RunDirError(
            f"{run_dir} already holds a written run (config.json); pass overwrite=True "
            "(--overwrite) to replace it, or choose another directory."
        )


def _success(result: SweepResult, params: list, episodes: int, seed: int, say) -> np.ndarray | None:
    """Per agent (``result.shape``): the greedy success rate, or None (skipped or the env
    has no notion of success). Each static setting is evaluated with its own config."""
    if not episodes or not has_success(result.config):
        return None
    say(f"evaluating {int(np.prod(result.shape))} agent(s) × {episodes} fresh greedy episodes ...")
    static = [k for k in result.axes if k in static_field_names()]
    combos = list(np.ndindex(*[len(result.axes[k]) for k in static]))
    out = np.zeros(result.shape)
    for combo, (p, norm) in zip(combos, params, strict=True):
        _, c = _program_of(result, combo)
        ev = evaluate(c, p, jax.random.PRNGKey(seed), episodes, obs_norm=norm)
        out[combo] = np.asarray(ev.success).mean(-1)
    return out


def resolved_config_json(cfg: PPOConfig) -> dict:
    """The config as ``config.json`` records it: every field, with defaults that depend on
    the env resolved (``maze=None`` on Maze-v0 is recorded as the maze it means), so the
    file says what ran. Reading it back gives an equivalent config."""
    return {**config_to_json(cfg), "maze": _json(cfg.maze_spec)}


# ------------------------------------------------------------------------------ internals ---
def place_line(meta: dict) -> str:
    """Where a run trained, from its ``config.json`` (earlier releases: not recorded)."""
    if "ran_on" not in meta:
        return "a machine this run directory does not record (written before 2026-12)"
    line = describe_place(meta["ran_on"])
    if "started_on" in meta:
        line += f", resumed from checkpoints written on {describe_place(meta['started_on'])}"
    return line


def where_it_ran(run_dir: Path) -> dict:
    """``config.json``'s record of where a run was computed: ``ran_on`` (this process: the
    one that finished it), and ``started_on`` when its checkpoints began elsewhere."""
    out = {"ran_on": ran_on()}
    started = _started_on(run_dir)
    if started is not None and _place(started) != _place(out["ran_on"]):
        out["started_on"] = started  # a checkpointed run moved between machines
    return out


def _started_on(run_dir: Path) -> dict | None:
    """Where a checkpointed run began (its ``sweep.json`` or ``pbt.json``), if recorded."""
    for name in ("sweep.json", "pbt.json"):
        if (run_dir / name).exists():
            return read_json(run_dir / name, name).get("ran_on")
    return None


def _place(where: dict) -> tuple:
    return tuple(where.get(k) for k in ("backend", "device_kind", "device_count", "jax"))


def _write_metrics(run_dir: Path, result: SweepResult) -> None:
    m = result.metrics
    names = list(result.axes)
    updates = m.episode_return.shape[-1]
    steps = env_steps(result)  # (*static axes, update)
    arrays = {f: np.asarray(v) for f, v in m.columns().items()}
    labels = {f"axis_{k}": np.asarray([_json(x) for x in v]) for k, v in result.axes.items()}
    buf = io.BytesIO()
    np.savez(
        buf, **arrays, **labels,
        axis_names=np.asarray([*names, "update"]), env_steps=steps,
        diverged=result.diverged,
    )  # fmt: skip
    atomic_write(run_dir / "metrics.npz", buf.getvalue())

    text = io.StringIO()
    writer = csv.writer(text)
    values = list(result.values) if "sample" in result.axes else []
    writer.writerow([*names, *values, "update", "env_steps", *arrays])
    cols = [a.reshape(-1, updates) for a in arrays.values()]
    n_static = steps.ndim - 1
    for a, index in enumerate(np.ndindex(*result.shape)):
        coords = [_json(result.axes[k][i]) for k, i in zip(names, index, strict=True)]
        vals = [float(result.values[k][index[: result.values[k].ndim]]) for k in values]
        agent_steps = steps[index[:n_static]]
        for u in range(updates):
            if agent_steps[u] < 0:
                break  # past this static setting's last update (NaN padding)
            row = [c[a, u] for c in cols]
            writer.writerow([*coords, *vals, u + 1, int(agent_steps[u]), *[_csv(x) for x in row]])
    atomic_write(run_dir / "metrics.csv", text.getvalue().encode())


def _add_run_columns(rows, result: SweepResult, success, timings) -> None:
    """Success rate over healthy seeds, and each row's own program's timings and steps/s:
    all agents of that program together (settings that share a program share its figure),
    steps trained in this call only, so a resumed run is not credited with earlier ones."""
    setting_shape = result.shape[:-1]
    static = [k for k in result.axes if k in static_field_names()]
    programs = timings.get("programs") or [timings]
    for row, index in zip(rows, np.ndindex(*setting_shape), strict=True):
        healthy = ~result.diverged[index]
        if success is not None and healthy.any():
            row["success_rate"] = float(success[index][healthy].mean())
        else:
            row["success_rate"] = None
        program, c = _program_of(result, index)
        t = programs[program] if program < len(programs) else {}
        agents = int(np.prod(result.shape[len(static) :]))
        run_s, updates = t.get("run_s"), t.get("updates_run", c.num_updates)
        row["steps_per_s"] = agents * updates * c.batch_size / run_s if run_s else None
        row["compile_s"] = t.get("compile_s")
        row["run_s"] = run_s


def _write_summary(run_dir: Path, rows: list[dict], result: SweepResult, meta: dict) -> None:
    keys = list(rows[0])
    text = io.StringIO()
    writer = csv.writer(text)
    writer.writerow(keys)
    for r in rows:
        writer.writerow([_csv(r[k]) for k in keys])
    atomic_write(run_dir / "summary.csv", text.getvalue().encode())

    setting = [k for k in keys if k not in _SUMMARY_COLUMNS]
    header = [*setting, "seeds", "final return", "IQM [95 % CI]", "success", "steps/s",
              "compile s", "run s"]  # fmt: skip
    lines = [
        f"# Summary: {result.config.env} {result.config.maze_spec or ''}".rstrip(),
        "",
        "Final return: each seed's mean episode return over its last 10 updates, averaged over",
        "healthy seeds. IQM: interquartile mean over seeds, percentile-bootstrap 95 % CI.",
        "Success: greedy policy, fresh episodes (n/a: skipped, or the env defines no success).",
        "Steps/s: all agents of the row's program together (one program per static setting),",
        "steps trained in this sitting over its run seconds (compile excluded).",
        f"Trained on {place_line(meta)}.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for r in rows:
        ci = r["iqm_ci"]
        iqm_s = _fmt(r["return_iqm"]) + (f" [{ci[0]:.3f}, {ci[1]:.3f}]" if ci else "")
        cells = [
            *[_fmt(r[k]) for k in setting],
            f"{r['healthy']}/{r['seeds']}",
            _fmt(r["return_mean"]),
            iqm_s,
            _fmt(r["success_rate"]),
            f"{r['steps_per_s']:,.0f}" if r["steps_per_s"] else "n/a",
            _fmt(r["compile_s"], 2),
            _fmt(r["run_s"], 2),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += _stats_table(result)
    diverged = result.diverged_agents()
    lines.append("")
    if diverged:
        lines.append(f"Diverged agents ({len(diverged)}), left out of every aggregate above:")
        lines += [f"- {', '.join(f'{k}={_fmt(v)}' for k, v in d.items())}" for d in diverged]
    else:
        lines.append("No agent diverged.")
    atomic_write(run_dir / "summary.md", ("\n".join(lines) + "\n").encode())


_SUMMARY_COLUMNS = {
    "seeds", "healthy", "scored", "return_mean", "return_iqm", "iqm_ci", "return_min",
    "return_max", "diverged", "success_rate", "steps_per_s", "compile_s", "run_s",
}  # fmt: skip


def _curves(result: SweepResult, healthy_only: bool = True) -> dict[str, np.ndarray]:
    ret = np.asarray(result.metrics.episode_return)
    setting_axes = list(result.axes)[:-1]
    out = {}
    for index in np.ndindex(*result.shape[:-1]):
        healthy = ~result.diverged[index]
        label = ", ".join(
            f"{k}={_fmt(result.axes[k][i])}" for k, i in zip(setting_axes, index, strict=True)
        )
        if healthy.any() or not healthy_only:
            out[label] = ret[index][healthy]
    return out


def _episode_stats(result: SweepResult) -> dict[str, dict[str, np.ndarray]]:
    """Per setting label, each episode statistic's (healthy seeds, updates) series."""
    setting_axes = list(result.axes)[:-1]
    out = {}
    for index in np.ndindex(*result.shape[:-1]):
        healthy = ~result.diverged[index]
        if not healthy.any():
            continue
        label = ", ".join(
            f"{k}={_fmt(result.axes[k][i])}" for k, i in zip(setting_axes, index, strict=True)
        )
        out[label] = {
            name: np.asarray(series, np.float64)[index][healthy]
            for name, series in result.metrics.episode_stats.items()
        }
    return out


def _stats_table(result: SweepResult) -> list[str]:
    """summary.md's table of the env's per-episode statistics (none: no lines): each
    seed's mean over its last 10 updates, averaged over healthy seeds, per setting."""
    if not result.metrics.episode_stats:
        return []
    import warnings

    stats = _episode_stats(result)
    labels = list(stats)
    lines = [
        "",
        "Episode statistics the env reports (e.g. achievements: the fraction of episodes that",
        "unlocked each): each seed's mean over its last 10 updates, averaged over healthy seeds.",
        "",
        "| statistic | " + " | ".join(label or "final" for label in labels) + " |",
        "|" + "---|" * (len(labels) + 1),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # updates where no episode ended
        for name in result.metrics.episode_stats:
            finals = [np.nanmean(np.nanmean(stats[k][name][:, -10:], axis=1)) for k in labels]
            lines.append(f"| {name} | " + " | ".join(_fmt(float(v)) for v in finals) + " |")
    return lines


def _curve_steps(result: SweepResult, steps: np.ndarray) -> dict[str, np.ndarray]:
    """Each curve's x values: its own program's env steps (NaN past its last update)."""
    labels = list(_curves(result, healthy_only=False))
    x = np.where(steps < 0, np.nan, steps.astype(np.float64))
    n_static = steps.ndim - 1
    return {
        label: x[index[:n_static]]
        for label, index in zip(labels, np.ndindex(*result.shape[:-1]), strict=True)
    }


def _best_agent(result: SweepResult) -> tuple[int, ...] | None:
    scores = final_scores(np.asarray(result.metrics.episode_return), 10)
    scores = np.where(result.diverged | ~np.isfinite(scores), -np.inf, scores)
    if not np.isfinite(scores).any():
        return None
    return tuple(int(i) for i in np.unravel_index(np.argmax(scores), scores.shape))


def _params_by_program(result: SweepResult) -> list[tuple]:
    """Per program: ``(params, obs_norm)`` (``obs_norm`` None without normalisation)."""
    if isinstance(result.state, list):
        return [(s.params, s.obs_norm) for s in result.state]
    agents = (result.state.params, result.state.obs_norm)
    if not result.state_static_shape:
        return [agents]
    # Stacked static settings (same shapes): split them back into one file per program.
    return [
        jax.tree.map(lambda x, i=idx: x[i], agents)
        for idx in np.ndindex(*result.state_static_shape)
    ]


def _json(x):
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, tuple):
        return list(x)
    return x


def _csv(x):
    if x is None:
        return ""
    if isinstance(x, (list, tuple)):
        return " ".join(str(_csv(v)) for v in x)
    if isinstance(x, (np.floating, float)):
        return f"{float(x):.6g}"
    return x


def _fmt(x, digits: int = 3) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        if x != 0 and (abs(x) < 1e-2 or abs(x) >= 1e5):
            return f"{x:.3g}"
        return f"{x:.{digits}f}"
    return str(x)


def write_tensorboard(log_dir: str | Path, result: SweepResult) -> None:
    """TensorBoard scalars (tensorboardX): every metric's mean/min/max over healthy agents
    per update, and per hyperparameter setting the mean return over its healthy seeds.

    Written after training from the metrics arrays (the `purejaxppo.tracking.TensorBoard`
    tracker writes it into ``<log_dir>/all agents`` when a run finishes); the x axis is
    environment steps per agent, each static setting's own (its aggregates are tagged
    ``<field>_<value>/``).
    """
    try:
        import tensorboardX  # noqa: F401
    except ImportError as e:
        raise ImportError(
            "TensorBoard logging needs tensorboardX: pip install 'purejaxppo[tb]'."
        ) from e
    from ._events import EventFile

    healthy = ~result.diverged
    all_steps = env_steps(result)  # (*static axes, update): each program's own
    series: list[tuple[str, np.ndarray, np.ndarray]] = []  # (tag, its steps, its values)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN updates
        static = [k for k in result.axes if k in static_field_names()]
        for program in np.ndindex(*all_steps.shape[:-1]):  # one per static setting
            steps = all_steps[program]
            prefix = "".join(
                f"{k}_{_fmt(result.axes[k][i])}/" for k, i in zip(static, program, strict=True)
            )
            for name, column in result.metrics.columns().items():
                x = np.asarray(column, np.float64)[program][healthy[program]]  # (agents, U)
                for stat, fn in (("mean", np.nanmean), ("min", np.nanmin), ("max", np.nanmax)):
                    values = fn(x, axis=0) if x.size else np.full(len(steps), np.nan)
                    series.append((f"{prefix}{name}/{stat}", steps, values))
        x_of = _curve_steps(result, all_steps)
        for label, returns in _curves(result).items():
            tag = "setting/" + (label.replace(", ", "/").replace("=", "_") or "all")
            series.append((tag, x_of[label], np.nanmean(returns, axis=0)))
    # one event per step with every tag's value there (steps × tags, NaN: none)
    kept = [np.isfinite(s) & (s >= 0) & np.isfinite(v) for _, s, v in series]
    steps = np.unique(np.concatenate([s[k] for (_, s, _), k in zip(series, kept, strict=True)]))
    table = np.full((len(steps), len(series)), np.nan)
    for j, ((_, s, v), k) in enumerate(zip(series, kept, strict=True)):
        table[np.searchsorted(steps, s[k]), j] = v[k]
    events = EventFile(log_dir)
    try:
        events.add_table(steps.astype(np.int64).tolist(), [t for t, _, _ in series], table)
    finally:
        events.close()
