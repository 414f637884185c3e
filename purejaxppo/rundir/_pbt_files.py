"""A PBT run directory's results: metrics, figures of the schedules and the lineage, summary.

``pbt.json`` and the checkpoints are written by `pbt` while it trains; `write_pbt_run` adds,
atomically and only from process 0:

* ``config.json``: the base config, the interval, the population as the axis ``"agent"``
  and each agent's final hyperparameters (``"values"``), timings, ``"finished"``;
* ``params.eqx``: every agent's final network (what ``purejaxppo eval`` evaluates);
* ``metrics.npz``: every `Metrics` field ``(population, update)``, ``hp_<field>`` schedules
  ``(population, update)``, ``lineage`` and ``fitness`` ``(population, generation)``;
* ``curves.png``: the population's mean return with a 95 % bootstrap band, and the best
  agent's own line;
* ``hyperparameters.png``: each tuned field's schedule for every agent (thin) and the best
  agent (thick), on a log axis for lr and adam_eps;
* ``lineage.png``: whose state each agent ran in each generation (the best agent's ancestry
  marked);
* ``summary.md``: the best agent (final return, final hyperparameters, ancestry), the
  population's median and quartiles, and the timings.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import jax
import numpy as np

from .._engine import Engine, engine_for
from .._figures import curve_band
from .._ppo import RunnerState
from .._results import History, PBTResult, unfilled
from .._search import LOG_UNIFORM_FIELDS, initial_population
from ..envs import describe_env
from ._format import CheckpointError, atomic_write, config_from_json, read_json, read_newest_intact
from ._lock import claim
from ._write import place_line, resolved_config_json, where_it_ran, write_params


def write_pbt_run(run_dir: str | Path, res: PBTResult, timings: dict) -> str:
    """Write the files above into ``run_dir``; returns the summary's text.

    ``config.json`` describes the population as one axis, ``"agent"``, with each agent's
    final hyperparameters in ``"values"``, and ``params.eqx`` holds every agent's final
    network (and observation statistics), so ``purejaxppo eval`` and `load_policy(run_dir,
    agent=i)` read a PBT run like a sweep. It says ``"finished": true`` once every other
    file is written.
    """
    run_dir = Path(run_dir)
    with claim(run_dir, "results"):  # one writer; re-entrant inside the run's own claim
        return _write_pbt_run(run_dir, res, timings)


def _write_pbt_run(run_dir: Path, res: PBTResult, timings: dict) -> str:
    best = res.best()
    meta = {
        "kind": "pbt",
        "config": resolved_config_json(res.config),
        "interval": res.interval,
        "axes": {"agent": list(range(res.population))},
        "values": {k: [float(x) for x in v[:, -1]] for k, v in res.hyperparameters.items()},
        "num_agents": res.population,
        "finished": False,  # until every file below is written
        "timings": timings,
        **where_it_ran(run_dir),
    }
    if describe_env(res.config) is not None:  # an own environment (read_run compares)
        meta["env"] = describe_env(res.config)
    atomic_write(run_dir / "config.json", json.dumps(meta, indent=1).encode())
    arrays = {k: np.asarray(v) for k, v in res.metrics.columns().items()}
    arrays.update({f"hp_{k}": v for k, v in res.hyperparameters.items()})
    arrays.update(lineage=res.lineage, fitness=res.fitness)
    buf = io.BytesIO()
    np.savez_compressed(buf, **arrays)
    atomic_write(run_dir / "metrics.npz", buf.getvalue())
    write_params(run_dir, [(res.state.params, res.state.obs_norm)], meta["config"], meta["axes"])
    steps = np.arange(1, res.metrics.episode_return.shape[1] + 1) * res.config.batch_size
    atomic_write(run_dir / "curves.png", _curves(res, best, steps))
    atomic_write(run_dir / "hyperparameters.png", _schedules(res, best, steps))
    atomic_write(run_dir / "lineage.png", _lineage(res, best))
    text = summary(res, timings) + f"\nTrained on {place_line(meta)}.\n"
    atomic_write(run_dir / "summary.md", text.encode())
    meta["finished"] = True
    atomic_write(run_dir / "config.json", json.dumps(meta, indent=1).encode())
    return text


def summary(res: PBTResult, timings: dict) -> str:
    """The run in a few lines of Markdown."""
    best = res.best()
    final = res.fitness[:, -1]
    scored = final[np.isfinite(final)]
    q = np.percentile(scored, [25, 50, 75]) if scored.size else [np.nan] * 3
    hp = ", ".join(f"{k}={v[-1]:.4g}" for k, v in best.hyperparameters.items())
    ancestry = " → ".join(str(a) for _, a in best.ancestry)
    steps = res.metrics.episode_return.shape[1] * res.config.batch_size * res.population
    lines = [
        f"# PBT: {res.config.env}, population {res.population}, interval {res.interval}",
        "",
        "Final return: each agent's mean episode return over the last interval.",
        "",
        "| | value |",
        "|---|---|",
        f"| best agent | {best.index} |",
        f"| its final return | {best.fitness:.4g} |",
        f"| its final hyperparameters | {hp} |",
        f"| whose state it ran, generation by generation | {ancestry} |",
        f"| population median (quartiles) | {q[1]:.4g} ({q[0]:.4g} – {q[2]:.4g}) |",
        f"| agents without a finite final return | {int((~np.isfinite(final)).sum())} |",
        f"| env steps, all agents | {steps:,} |",
        f"| compile s / run s | {timings.get('compile_s', 0):.2f} / {timings.get('run_s', 0):.2f} |",  # noqa: E501
    ]
    return "\n".join(lines) + "\n"


def _png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


def _figure(rows: int = 1, height: float = 4.0):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(rows, 1, figsize=(6.4, height * rows), dpi=120, squeeze=False)


def _curves(res: PBTResult, best, steps: np.ndarray) -> bytes:
    fig, ax = _figure()
    ax = ax[0, 0]
    returns = np.asarray(res.metrics.episode_return)
    mean, low, high = curve_band(returns)
    (line,) = ax.plot(steps, mean, label=f"population mean ({res.population} agents)")
    ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.25, linewidth=0)
    ax.plot(steps, best.metrics.episode_return, color="k", linewidth=1,
            label=f"best agent ({best.index}), along its ancestry")  # fmt: skip
    for g in range(1, res.lineage.shape[1]):
        ax.axvline(g * res.interval * res.config.batch_size, color="0.85", linewidth=0.5)
    ax.set_xlabel("environment steps per agent (grey: exploit/explore steps)")
    ax.set_ylabel("episode return")
    ax.set_title("PBT — mean over agents, 95 % bootstrap CI", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _png(fig)


def _schedules(res: PBTResult, best, steps: np.ndarray) -> bytes:
    names = list(res.hyperparameters)
    fig, axes = _figure(len(names), 3.0)
    for ax, name in zip(axes[:, 0], names, strict=True):
        values = res.hyperparameters[name]
        ax.plot(steps, values.T, color="tab:blue", alpha=0.25, linewidth=0.6,
                drawstyle="steps-pre")  # fmt: skip
        label = f"best agent ({best.index}), along its ancestry"
        ax.plot(steps, best.hyperparameters[name], color="k", linewidth=1.5,
                drawstyle="steps-pre", label=label)  # fmt: skip
        if name in LOG_UNIFORM_FIELDS:
            ax.set_yscale("log")
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[-1, 0].set_xlabel("environment steps per agent")
    axes[0, 0].set_title(
        "each agent slot's values (thin) and the best agent's schedule", fontsize=9
    )
    return _png(fig)


def _lineage(res: PBTResult, best) -> bytes:
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    fig, ax = _figure()
    ax = ax[0, 0]
    n, generations = res.lineage.shape
    drawn = set()
    for g in range(1, generations):
        for i in range(n):
            parent = res.lineage[i, g]
            copied = parent != i
            drawn.add(copied)
            ax.plot(
                [g - 1, g], [parent, i], color="tab:red" if copied else "0.6",
                linewidth=0.8 if copied else 0.5,
            )  # fmt: skip
    gens, agents = zip(*best.ancestry, strict=True)
    ax.plot(gens, agents, color="k", linewidth=2, marker="o", markersize=3)
    # The legend names exactly the kinds of line drawn (a run of one generation has none).
    handles = [Line2D([], [], color="k", linewidth=2, marker="o", markersize=3,
                      label=f"best agent's ancestry ({best.index})")]  # fmt: skip
    if True in drawn:
        handles.append(Line2D([], [], color="tab:red", linewidth=0.8,
                              label="copied a top agent's state"))  # fmt: skip
    if False in drawn:
        handles.append(Line2D([], [], color="0.6", linewidth=0.5, label="kept its own state"))
    ax.set_xlabel("generation")
    ax.set_ylabel("agent")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    title = "lineage: whose state each agent continued from"
    if generations < 2:
        title += " (one generation: no exploit step ran)"
    ax.set_title(title, fontsize=9)
    ax.legend(handles=handles, fontsize=7)
    return _png(fig)


def read_pbt_checkpoint(run_dir: str | Path) -> tuple[RunnerState, dict, History]:
    """The newest intact checkpoint of the PBT run in ``run_dir``: every agent's state, its
    current hyperparameters (field -> (population,)) and the run's `History` so far.

    For PBT directories written before ``params.eqx`` was part of them (evaluation reads the
    final agents from here)."""
    spec = read_json(Path(run_dir) / "pbt.json", "pbt.json")
    cfg = config_from_json(spec["config"])
    step = spec["step"]
    ranges = {name: (low, high) for name, low, high, _ in step["ranges"]}
    keys, hp, pbt_key = initial_population(cfg, spec["population"], spec["seed"], ranges)
    engine = engine_for(cfg, mesh=False)
    generations = -(-cfg.num_updates // spec["interval"])
    names = list(ranges)
    like = checkpoint_like(
        engine, keys, hp, pbt_key, names, empty_history(engine, keys, hp, names, generations)
    )
    identity = {"pbt": {k: v for k, v in spec.items() if k != "run"}, "run": spec.get("run", "")}
    loaded = read_newest_intact(run_dir, identity, like)
    if loaded is None:
        raise CheckpointError(f"{run_dir}: this PBT run has no checkpoint to read.")
    state, values, _, history = loaded
    return state, values, history


def empty_history(engine: Engine, keys, hp, names: list[str], generations: int) -> History:
    """A `History` with nothing run yet (NaN / -1 / 0)."""
    n, updates = len(keys), engine.cfg.num_updates
    _, one = engine.shapes(keys, hp)
    return History(
        metrics=jax.tree.map(lambda x: unfilled((n, updates), x.dtype), one),
        hyperparameters={k: np.full((n, updates), np.nan, np.float32) for k in names},
        lineage=np.full((n, generations), -1, np.int32),
        fitness=np.full((n, generations), np.nan, np.float32),
        done=np.asarray(0, np.int32),
    )


def checkpoint_like(engine: Engine, keys, hp, pbt_key, names: list[str], history: History):
    """The template a PBT checkpoint is read into: (state, hyperparameters, PBT key, history)."""
    like_state, _ = engine.shapes(keys, hp)
    return (
        jax.tree.map(lambda x: np.zeros(x.shape, x.dtype), like_state),
        {k: np.zeros(len(keys), np.float32) for k in names},
        np.zeros_like(np.asarray(pbt_key)),
        history,
    )
