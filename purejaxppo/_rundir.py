"""The run directory: everything a CLI run (or `write_run`) leaves behind, and loaders.

    config.json     the full config, the swept axes and values, seeds, timings
    metrics.npz     every per-update metric, shape (*axes, update), with labelled axes
    metrics.csv     the same in tidy/long form: one row per agent × update (pandas-ready)
    params.eqx      trained parameters of every agent (Equinox serialisation)
    curves.png      learning curves: mean over seeds, 95 % bootstrap band, one line per setting
    summary.md/csv  per setting: final return, IQM with 95 % bootstrap CI, success rate,
                    steps/s, compile and run seconds; diverged agents named
    agent.gif       the best agent playing one episode (Jumanji's own renderer)

`load_policy(run_dir, lr=3e-4, seed=2)` brings one agent back as a plain callable.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np

from ._axes import index_of, split_program, static_setting
from ._checkpoint import atomic_write, config_from_json, config_to_json
from ._config import PPOConfig, static_field_names
from ._evaluate import Policy, evaluate, policy_of
from ._figures import plot_curves, write_gif
from ._networks import AbstractActorCritic, network_shapes
from ._ppo import Metrics
from ._sweep import SweepResult
from .envs import can_render

FILES = ("config.json", "metrics.npz", "metrics.csv", "params.eqx", "curves.png", "summary.md")


def write_run(
    run_dir: str | Path,
    result: SweepResult,
    *,
    timings: dict | None = None,
    eval_episodes: int = 32,
    gif: bool = True,
    eval_seed: int = 10_000,
) -> dict:
    """Write the run directory for a `SweepResult` (a single run is a 1-seed sweep).

    ``eval_episodes`` fresh greedy episodes per agent give the success rate (0: skip it).
    Returns the summary rows.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = result.config
    timings = dict(timings or {})
    axes = {k: [_json(x) for x in v] for k, v in result.axes.items()}
    num_agents = int(np.prod(result.shape))
    meta = {
        "config": config_to_json(cfg),
        "axes": axes,
        "values": {k: np.asarray(v).tolist() for k, v in result.values.items()},
        "num_agents": num_agents,
        "finished": result.finished,
        "timings": timings,
    }
    atomic_write(run_dir / "config.json", json.dumps(meta, indent=1).encode())
    _write_metrics(run_dir, result)
    params = _params_by_program(result)
    for i, p in enumerate(params):
        buf = io.BytesIO()
        eqx.tree_serialise_leaves(buf, p)
        atomic_write(run_dir / _params_name(i, len(params)), buf.getvalue())

    success = None
    if eval_episodes and not isinstance(result.state, list):
        ev = evaluate(cfg, result.state.params, jax.random.PRNGKey(eval_seed), eval_episodes)
        success = np.asarray(ev.success).mean(-1)  # (*axes)
    rows = result.summary()
    _add_run_columns(rows, result, success, timings, num_agents)
    _write_summary(run_dir, rows, result)
    curves = _curves(result)
    steps = (np.arange(result.metrics.episode_return.shape[-1]) + 1) * cfg.batch_size
    plot_curves(run_dir / "curves.png", curves, steps, f"{cfg.env} {cfg.maze_spec or ''}")
    if gif and can_render(cfg):
        best = _best_agent(result)
        if best is not None:
            agent = result.agent_at(best)
            write_gif(run_dir / "agent.gif", agent.config, Policy(agent.state.params),
                      jax.random.PRNGKey(eval_seed + 1))  # fmt: skip
    return rows


# ------------------------------------------------------------------------------- loaders ---
def read_run(run_dir: str | Path) -> dict:
    """``config.json`` of a run directory, with ``config`` as a `PPOConfig`."""
    path = Path(run_dir) / "config.json"
    if not path.exists():
        raise FileNotFoundError(f"{run_dir}: no config.json; is this a purejaxppo run directory?")
    meta = json.loads(path.read_text())
    meta["config"] = config_from_json(meta["config"])
    return meta


def load_params(run_dir: str | Path) -> list[AbstractActorCritic]:
    """Trained parameters: one stacked network per program (static setting), each with
    leading axes ``(*hyperparameter axes, seed)``."""
    meta = read_run(run_dir)
    cfg, axes = meta["config"], meta["axes"]
    static = [len(v) for k, v in axes.items() if k in static_field_names()]
    hyper = [len(v) for k, v in axes.items() if k not in static_field_names()]
    combos = list(np.ndindex(*static))  # one program per static setting ([()]: one)
    out = []
    for i, combo in enumerate(combos):
        c = cfg.replace(**static_setting(axes, (*combo, *[0] * len(hyper))))
        like = _params_like(c, hyper)
        path = Path(run_dir) / _params_name(i, len(combos))
        out.append(eqx.tree_deserialise_leaves(path, like))
    return out


def load_policy(run_dir: str | Path, **coords: Any) -> Policy:
    """One agent of a run as ``policy(obs, mask, key=None) -> action``, picked by its swept
    coordinates (``seed=2``, ``lr=3e-4``; axes of length one may be omitted)."""
    axes = read_run(run_dir)["axes"]
    program, local = split_program(axes, index_of(axes, coords))
    return policy_of(load_params(run_dir)[program], local)


# ------------------------------------------------------------------------------ internals ---
def _write_metrics(run_dir: Path, result: SweepResult) -> None:
    m = result.metrics
    names = list(result.axes)
    updates = m.episode_return.shape[-1]
    env_steps = (np.arange(updates) + 1) * result.config.batch_size
    arrays = {f: np.asarray(getattr(m, f)) for f in Metrics._fields}
    labels = {f"axis_{k}": np.asarray([_json(x) for x in v]) for k, v in result.axes.items()}
    buf = io.BytesIO()
    np.savez(
        buf, **arrays, **labels,
        axis_names=np.asarray([*names, "update"]), env_steps=env_steps,
        diverged=result.diverged,
    )  # fmt: skip
    atomic_write(run_dir / "metrics.npz", buf.getvalue())

    text = io.StringIO()
    writer = csv.writer(text)
    values = list(result.values) if "sample" in result.axes else []
    writer.writerow([*names, *values, "update", "env_steps", *Metrics._fields])
    cols = [arrays[f].reshape(-1, updates) for f in Metrics._fields]
    for a, index in enumerate(np.ndindex(*result.shape)):
        coords = [_json(result.axes[k][i]) for k, i in zip(names, index, strict=True)]
        vals = [float(result.values[k][index[: result.values[k].ndim]]) for k in values]
        for u in range(updates):
            row = [c[a, u] for c in cols]
            writer.writerow([*coords, *vals, u + 1, int(env_steps[u]), *[_csv(x) for x in row]])
    atomic_write(run_dir / "metrics.csv", text.getvalue().encode())


def _add_run_columns(rows, result: SweepResult, success, timings, num_agents) -> None:
    setting_shape = result.shape[:-1]
    for row, index in zip(rows, np.ndindex(*setting_shape), strict=True):
        healthy = ~result.diverged[index]
        if success is not None and healthy.any():
            row["success_rate"] = float(success[index][healthy].mean())
        else:
            row["success_rate"] = None
    run_s = timings.get("run_s")
    steps = result.config.total_timesteps * num_agents
    for row in rows:
        row["steps_per_s"] = steps / run_s if run_s else None
        row["compile_s"] = timings.get("compile_s")
        row["run_s"] = run_s


def _write_summary(run_dir: Path, rows: list[dict], result: SweepResult) -> None:
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
        "Success: greedy policy, fresh episodes. Steps/s: all agents together, run only.",
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


def _curves(result: SweepResult) -> dict[str, np.ndarray]:
    ret = np.asarray(result.metrics.episode_return)
    setting_axes = list(result.axes)[:-1]
    out = {}
    for index in np.ndindex(*result.shape[:-1]):
        healthy = ~result.diverged[index]
        label = ", ".join(
            f"{k}={_fmt(result.axes[k][i])}" for k, i in zip(setting_axes, index, strict=True)
        )
        if healthy.any():
            out[label] = ret[index][healthy]
    return out


def _best_agent(result: SweepResult) -> tuple[int, ...] | None:
    from ._sweep import final_scores

    scores = final_scores(np.asarray(result.metrics.episode_return), 10)
    scores = np.where(result.diverged | ~np.isfinite(scores), -np.inf, scores)
    if not np.isfinite(scores).any():
        return None
    return tuple(int(i) for i in np.unravel_index(np.argmax(scores), scores.shape))


def _params_by_program(result: SweepResult) -> list:
    states = result.state if isinstance(result.state, list) else [result.state]
    if isinstance(result.state, list):
        return [s.params for s in states]
    n_static = len(result.state_static_shape)
    if n_static == 0:
        return [result.state.params]
    # Stacked static settings (same shapes): split them back into one file per program.
    out = []
    for idx in np.ndindex(*result.state_static_shape):
        out.append(jax.tree.map(lambda x, i=idx: x[i], result.state.params))
    return out


def _params_like(cfg: PPOConfig, batch: list[int]):
    from .envs import make_env

    env = make_env(cfg)
    one = network_shapes(cfg, env.obs_shape, env.action_dims)
    return jax.tree.map(lambda x: np.zeros((*batch, *x.shape), x.dtype), one)


def _params_name(i: int, n: int) -> str:
    return "params.eqx" if n == 1 else f"params-{i}.eqx"


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

    Written after training (or after each `purejaxppo train` run) from the metrics arrays;
    the x axis is environment steps per agent.
    """
    try:
        from tensorboardX import SummaryWriter
    except ImportError as e:
        raise ImportError(
            "TensorBoard logging needs tensorboardX: pip install 'purejaxppo[tb]'."
        ) from e
    healthy = ~result.diverged
    steps = (np.arange(result.metrics.episode_return.shape[-1]) + 1) * result.config.batch_size
    writer = SummaryWriter(str(log_dir))
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN updates
            for name in Metrics._fields:
                x = np.asarray(getattr(result.metrics, name), np.float64)[healthy]  # (agents, U)
                for stat, fn in (("mean", np.nanmean), ("min", np.nanmin), ("max", np.nanmax)):
                    values = fn(x, axis=0) if x.size else np.full(len(steps), np.nan)
                    for s, v in zip(steps, values, strict=True):
                        if np.isfinite(v):
                            writer.add_scalar(f"{name}/{stat}", float(v), int(s))
            for label, returns in _curves(result).items():
                mean = np.nanmean(returns, axis=0)
                tag = "setting/" + (label.replace(", ", "/").replace("=", "_") or "all")
                for s, v in zip(steps, mean, strict=True):
                    if np.isfinite(v):
                        writer.add_scalar(tag, float(v), int(s))
    finally:
        writer.close()
