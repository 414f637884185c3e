"""``purejaxppo bench``: compile seconds and steps/s at several agent counts, as a table."""

from __future__ import annotations

import time

from .._config import PPOConfig
from ._checks import mesh_of
from ._files import config_of
from ._flags import BenchCmd
from ._progress import maze_name

GPU_SUITE_AGENTS = (1, 64, 256, 1024, 4096)


def bench(cmd: BenchCmd) -> int:
    import jax

    from .._bench import time_full_run, time_updates
    from .._engine import Engine, mesh_for

    cfg = PPOConfig() if cmd.suite == "gpu" else config_of(cmd)
    counts = GPU_SUITE_AGENTS if cmd.suite == "gpu" else cmd.agents
    if cmd.updates < 1 or any(a < 1 for a in counts):
        raise ValueError("bench: --updates and every --agents count must be positive.")
    if any(g < 1 for g in cmd.group_sizes):
        raise ValueError("bench: every --group-sizes width must be positive.")
    mesh = mesh_of(cmd.devices)
    print(
        f"purejaxppo bench: {cfg.env} maze={maze_name(cfg)}, {cfg.batch_size:,} steps/update "
        f"per agent, {cmd.updates} timed update(s) | {jax.default_backend()} × "
        f"{jax.device_count()} device(s) ({jax.devices()[0].device_kind}"
        + (", PUREJAXPPO_CPU_DEVICES sets how many" if jax.default_backend() == "cpu" else "")
        + ")",
        flush=True,
    )
    header = (
        f"{'agents':>7} {'group':>6} {'compile s':>10} {'s/update':>9} {'steps/s':>13} "
        f"{'per agent':>10} {'× first':>8}"
    )
    print(header + "\n" + "-" * len(header), flush=True)
    start = time.perf_counter()
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
    if cmd.suite == "gpu":
        count, left = 256, cmd.budget_s - (time.perf_counter() - start)
        row = next((r for r in rows if r.agents == count), None)
        if row is None:  # its timing row was skipped for the budget: the full run would be too
            print(f"\nfull run, {count} agents: skipped (its timing row was skipped)")
            return 0
        estimate = row.compile_s * 1.5 + row.update_s * cfg.num_updates
        if estimate > left:
            print(f"\nfull run, {count} agents: skipped (estimated {estimate:.0f} s > {left:.0f})")
            return 0
        run = time_full_run(cfg, count, mesh)
        print(
            f"\nfull run, {count} agents × {cfg.total_timesteps:,} steps: {run.total_s:.1f} s "
            f"(compile {run.compile_s:.1f} s, run {run.total_s - run.compile_s:.1f} s); "
            f"mean return of the last 10 updates {run.final_return:.3f}"
        )
    return 0
