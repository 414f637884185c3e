"""``purejaxppo train`` and ``purejaxppo sweep``: one config (or a sweep) for N seeds, into a
run directory, checkpointed as it goes; ``--resume`` continues one."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path

from ..tracking._runs import finish_held, hold_finish, summary_row
from ._checks import check_run_flags, compile_cache, mesh_of, trackers_of
from ._files import config_of
from ._flags import SweepCmd
from ._progress import ProgressBar, compiling, env_name, log, say
from ._signals import StopOnSignal


def train(cmd, argv: list[str]) -> int:
    """``purejaxppo train | sweep``: every check (flags, config, axes, memory) passes before
    anything is printed, written or compiled."""
    import jax

    check_run_flags(cmd, argv)
    name = "sweep" if isinstance(cmd, SweepCmd) else "train"
    if cmd.resume:
        info = resumable(cmd.resume, name)
        if info is None:
            return 0  # finished: nothing to do
    if cmd.distributed:
        jax.distributed.initialize(cmd.coordinator_address, cmd.num_processes, cmd.process_id)
    compile_cache(cmd)
    from .._search import check_sweep_args
    from ..rundir._lock import claim

    axes = {}
    if cmd.resume:
        run_dir, cfg, num_agents, name = info.path, info.config, info.num_agents, info.kind
    else:
        if isinstance(cmd, SweepCmd):
            axes = {k: v for k, v in dataclasses.asdict(cmd.sweep).items() if v is not None}
            if not axes:
                raise ValueError("sweep: give at least one --sweep.<field> list (see --help).")
        cfg = config_of(cmd)
        run_dir = Path(cmd.run_dir or f"runs/{name}-{time.strftime('%Y%m%d-%H%M%S')}")
        search = dict(search=cmd.search, num_samples=cmd.num_samples) if axes else {}
        num_agents = check_sweep_args(  # every swept value and the memory, before compiling
            cfg, cmd.seeds, search.get("search", "grid"), search.get("num_samples"), axes,
            chunked=cmd.checkpoint_every != 0,
        )  # fmt: skip
    mesh = mesh_of(cmd.devices)
    main_process = jax.process_index() == 0
    mode = "resume" if cmd.resume else "overwrite" if cmd.overwrite else "new"
    owner = claim(run_dir, mode) if main_process else contextlib.nullcontext()
    chunked = cmd.checkpoint_every != 0 or bool(cmd.resume)
    trackers = trackers_of(cmd, run_dir if cmd.resume else None)
    with owner, StopOnSignal(run_dir if chunked else None, name) as stop, hold_finish() as held:
        return _train_in(
            cmd, cfg, axes, run_dir, num_agents, mesh, main_process, stop, name, trackers, held
        )


def resumable(run_dir: str, command: str):
    """The `RunInfo` of a run to ``--resume``, or None (said in a line) when it has finished.

    A finished run is left exactly as it is: its results and timings stay those it recorded.
    """
    from ..rundir import describe

    info = describe(run_dir)
    if (info.kind == "pbt") != (command == "pbt"):
        raise ValueError(
            f"--resume {run_dir}: it holds a {info.kind} run; resume it with: {info.resume_command}"
        )
    if info.finished:
        print(
            f"purejaxppo {command}: {run_dir} holds a finished {info.kind} run "
            f"({info.total} {'generations' if info.kind == 'pbt' else 'updates'}); nothing to "
            f"resume, nothing changed. Evaluate it with: purejaxppo eval {run_dir}"
        )
        return None
    return info


def _train_in(
    cmd, cfg, axes, run_dir, num_agents, mesh, main_process, stop, name, trackers, held
) -> int:
    """The run itself, with ``run_dir`` owned and signals watched."""

    from .._backend import devices_line
    from .._sweep import resume_sweep, sweep

    bar = ProgressBar(cfg, num_agents) if cmd.progress and main_process else None
    say(
        f"purejaxppo {name}: {env_name(cfg)} | {num_agents} agent(s) × "
        f"{cfg.total_timesteps:,} steps = {cfg.num_updates} updates × {cfg.num_envs} envs × "
        f"{cfg.num_steps} steps | backend {devices_line()} | run dir {run_dir}",
        main_process,
    )
    say(compiling(cmd.progress), main_process)
    chunked = stop.run_dir is not None
    options = dict(mesh=mesh, progress=bar, progress_every=cmd.progress_every, tracker=trackers)
    if chunked:  # the results, with evaluation and the GIF, are written below
        options.update(should_stop=stop, write_results=False)
    if cmd.stop_at is not None:
        options["stop_at"] = cmd.stop_at
    t0 = time.perf_counter()
    try:
        if cmd.resume:
            result = resume_sweep(run_dir, **options)
        else:
            seeds = list(range(cmd.seed, cmd.seed + cmd.seeds))
            search = dict(search=cmd.search, num_samples=cmd.num_samples) if axes else {}
            options["group_size"] = cmd.group_size
            if chunked:
                every = "auto" if cmd.checkpoint_every is None else cmd.checkpoint_every
                options.update(run_dir=run_dir, checkpoint_every=every, overwrite=cmd.overwrite)
            result = sweep(cfg, seeds, **search, **options, **axes)
    except OSError as e:
        raise ValueError(_write_failure(e, run_dir, name, chunked)) from e
    total = time.perf_counter() - t0
    if bar is not None:
        bar.close()
    if not result.finished:
        return stop.stopped(cmd.stop_at, main_process, "a chunk boundary")
    timings = {**result.timings, "total_s": total}
    if main_process:
        from ..rundir import write_run

        try:
            rows = write_run(
                run_dir, result, timings=timings, eval_episodes=cmd.eval_episodes,
                gif=cmd.gif, overwrite=True, log=log,  # the claim above made the checks
            )  # fmt: skip
        except OSError as e:
            raise ValueError(_write_failure(e, run_dir, name, chunked)) from e
        if held:  # the trackers' summary: the table with its success rates, figures, GIF
            log("tracking: writing the summary and figures ...")
            finish_held(held, run_dir, [summary_row(r) for r in rows])
        _print_summary(cfg, result, rows, timings, run_dir)
    return 0


def _write_failure(e: OSError, run_dir: Path, name: str, chunked: bool) -> str:
    """One line for a write that failed mid-run (a full disk, a vanished mount)."""
    from ..rundir._format import checkpoints

    where = e.filename or run_dir
    found = checkpoints(run_dir) or sorted(Path(run_dir).glob("ckpt-p*.eqx"))
    if chunked and found:
        return (
            f"writing {where} failed ({e.strerror}); the last good checkpoint "
            f"{found[-1].name} is intact: free space, then resume with: "
            f"purejaxppo {name} --resume {run_dir}"
        )
    return f"writing {where} failed ({e.strerror}); nothing to resume from: free space and rerun."


def _print_summary(cfg, result, rows, timings, run_dir) -> None:
    import numpy as np

    print("\nsummary")
    means = [r["return_mean"] for r in rows if r["return_mean"] is not None]
    if means:  # the one definition, as in summary.md
        print(f"  final return (each seed's mean over its last 10 updates) {np.mean(means):.4f}")
    n = int(np.prod(result.shape))
    print(f"  agents                            {n}")
    print(f"  env steps per agent               {cfg.total_timesteps:,}")
    from ..rundir._write import steps_trained

    if timings["run_s"] > 0:
        steps = steps_trained(result) / timings["run_s"]
        print(f"  steps/s (this sitting, run only)  {steps:,.0f}")
    print(f"  compile s                         {timings['compile_s']:.2f}")
    print(f"  run s                             {timings['run_s']:.2f}")
    print(f"  total s                           {timings['total_s']:.2f}")
    from .._memory import device_peak, format_bytes

    peak = device_peak()
    if peak is not None:  # an accelerator's allocator (a program's scratch space is not in it)
        print(f"  device memory held by arrays      {format_bytes(peak[0])} at peak, of "
              f"{format_bytes(peak[1])}")  # fmt: skip
    for d in result.diverged_agents():
        print(f"  diverged: {d}")
    print(f"\n{(Path(run_dir) / 'summary.md').read_text()}")
    print(f"run directory: {run_dir}")
