"""``purejaxppo bench``: compile seconds and steps/s at several agent counts, as a table."""

from __future__ import annotations

import dataclasses
import sys
import time
import warnings
from importlib.util import find_spec

from .._config import PPOConfig
from ._checks import mesh_of
from ._files import config_of
from ._flags import BenchCmd
from ._progress import maze_name

#: ``--suite scaling``: the medium maze at these agent counts (then 256 agents' full run) ...
MAZE_AGENTS = (1, 64, 256, 1024, 4096)
#: ... and PureJaxRL's CartPole config (`PUREJAXRL_CARTPOLE`) at these.
CARTPOLE_AGENTS = (1, 256, 2048)
#: The full run timed after the maze rows.
FULL_RUN_AGENTS = 256


def bench(cmd: BenchCmd) -> int:

    if cmd.updates < 1 or any(a < 1 for a in cmd.agents):
        raise ValueError("bench: --updates and every --agents count must be positive.")
    if any(g < 1 for g in cmd.group_sizes):
        raise ValueError("bench: every --group-sizes width must be positive.")
    if cmd.suite == "gpu":
        print(
            "purejaxppo bench: --suite gpu is now --suite scaling (any backend); the old name "
            "goes in the next release.",
            file=sys.stderr,
            flush=True,
        )
    mesh = mesh_of(cmd.devices)
    start = time.perf_counter()
    if cmd.suite == "none":
        table(timed_config(cmd), cmd.agents, cmd, mesh, start)
        return 0
    rows = table(PPOConfig(), MAZE_AGENTS, cmd, mesh, start)
    full_run(PPOConfig(), rows, cmd, mesh, start)
    print()
    if find_spec("gymnax") is None:
        print("CartPole rows skipped: they need gymnax (pip install 'purejaxppo[gymnax]').")
        return 0
    from .._bench import PUREJAXRL_CARTPOLE

    with warnings.catch_warnings():  # its 5e5 steps are not a whole number of updates
        warnings.simplefilter("ignore")
        cartpole = PPOConfig.from_purejaxrl(PUREJAXRL_CARTPOLE)
    table(cartpole, CARTPOLE_AGENTS, cmd, mesh, start, " (PureJaxRL's ppo.py config)")
    return 0


def timed_config(cmd: BenchCmd) -> PPOConfig:
    """The config ``bench`` times: the flags', its ``total_timesteps`` rounded up to whole
    batches of ``num_envs × num_steps`` when it is not one (``bench`` times a few updates,
    so the length only sets the learning rate's annealing horizon), saying so."""
    batch = cmd.num_envs * cmd.num_steps
    total = cmd.total_timesteps
    if isinstance(batch, int) and batch > 0 and isinstance(total, int) and total % batch:
        rounded = max(1, -(-total // batch)) * batch
        print(f"purejaxppo bench: --total-timesteps {total:,} → {rounded:,} (whole batches).")
        cmd = dataclasses.replace(cmd, total_timesteps=rounded)
    return config_of(cmd)


def table(cfg: PPOConfig, counts, cmd: BenchCmd, mesh, start: float, label: str = "") -> list:
    """One table: each count (and each ``--group-sizes`` width), within ``--budget-s``."""
    import jax

    from .._bench import time_updates
    from .._engine import Engine
    from .._placement import mesh_for

    where = f" maze={maze_name(cfg)}" if cfg.env == "Maze-v0" else ""
    print(
        f"purejaxppo bench: {cfg.env}{where}{label}, {cfg.batch_size:,} steps/update per agent, "
        f"{cmd.updates} timed update(s) | {jax.default_backend()} × {jax.device_count()} "
        f"device(s) ({jax.devices()[0].device_kind}"
        + (", PUREJAXPPO_CPU_DEVICES sets how many" if jax.default_backend() == "cpu" else "")
        + ")",
        flush=True,
    )
    header = (
        f"{'agents':>7} {'group':>6} {'compile s':>10} {'s/update':>9} {'steps/s':>13} "
        f"{'per agent':>10} {'× first':>8}"
    )
    print(header + "\n" + "-" * len(header), flush=True)
    rows = []
    for count in counts:
        timed = set()  # each layout once: widths ≥ the agents per device are all the same
        for width in (None, *cmd.group_sizes):
            layout = Engine(cfg, mesh=mesh_for(mesh, count), group_size=width).group_width(count)
            if layout in timed:
                continue
            timed.add(layout)
            left = cmd.budget_s - (time.perf_counter() - start)
            if rows:  # estimate from the previous row: linear in agents at worst
                last = rows[-1]
                estimate = last.compile_s * 1.5 + last.update_s * count / last.agents * (
                    cmd.updates + 1
                )
                if estimate > left:
                    print(f"{count:>7} skipped: estimated {estimate:.0f} s > {left:.0f} s left")
                    break
            row = time_updates(cfg, count, cmd.updates, mesh, group_size=width)
            rows.append(row)
            label = f"{row.group_size}" + ("*" if width is None else "")
            print(
                f"{count:>7} {label:>6} {row.compile_s:>10.2f} {row.update_s:>9.3f} "
                f"{row.steps_per_s:>13,.0f} {row.steps_per_s_per_agent:>10,.0f} "
                f"{row.steps_per_s / rows[0].steps_per_s:>8.2f}",
                flush=True,
            )
    print("\ngroup: agents vmapped together per device (* the default width on this backend)")
    if len(rows) > 1:
        best = max(rows, key=lambda r: r.steps_per_s)
        ratio = best.steps_per_s / rows[0].steps_per_s
        print(
            f"aggregate steps/s, {best.agents} agents in groups of {best.group_size} vs "
            f"{rows[0].agents}: {ratio:.2f}×"
        )
    return rows


def full_run(cfg: PPOConfig, rows: list, cmd: BenchCmd, mesh, start: float) -> None:
    """`FULL_RUN_AGENTS` agents' whole run, compile included, if the budget allows."""
    from .._bench import time_full_run

    count, left = FULL_RUN_AGENTS, cmd.budget_s - (time.perf_counter() - start)
    row = next((r for r in rows if r.agents == count), None)
    if row is None:  # its timing row was skipped for the budget: the full run would be too
        print(f"\nfull run, {count} agents: skipped (its timing row was skipped)")
        return
    estimate = row.compile_s * 1.5 + row.update_s * cfg.num_updates
    if estimate > left:
        print(f"\nfull run, {count} agents: skipped (estimated {estimate:.0f} s > {left:.0f})")
        return
    run = time_full_run(cfg, count, mesh)
    print(
        f"\nfull run, {count} agents × {cfg.total_timesteps:,} steps: {run.total_s:.1f} s "
        f"(compile {run.compile_s:.1f} s, run {run.total_s - run.compile_s:.1f} s); "
        f"mean return of the last 10 updates {run.final_return:.3f}",
        flush=True,
    )
