"""``purejaxppo pbt``: population-based training into a PBT run directory."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path

from ..tracking._runs import finish_held, hold_finish
from ._checks import check_run_flags, compile_cache, mesh_of, trackers_of
from ._files import config_of
from ._flags import PBTCmd
from ._progress import ProgressBar, compiling, env_name, say
from ._signals import StopOnSignal
from ._train import resumable


def train_pbt(cmd: PBTCmd, argv: list[str]) -> int:
    """``purejaxppo pbt``: every argument checked (exit 2) before anything compiles."""
    import jax

    from .._backend import devices_line
    from .._host_memory import check_pbt_memory
    from .._pbt import check_pbt_args, pbt, resume_pbt
    from ..rundir._lock import claim

    check_run_flags(cmd, argv)
    if cmd.resume:
        info = resumable(cmd.resume, "pbt")
        if info is None:
            return 0  # finished: nothing to do
        run_dir, cfg, population, chunked = info.path, info.config, info.num_agents, True
    else:
        cfg = config_of(cmd)
        ranges = {k: v for k, v in dataclasses.asdict(cmd.pbt).items() if v is not None}
        check_pbt_args(
            cfg, cmd.population, cmd.interval, "truncation", cmd.fraction, "perturb",
            cmd.factors, cmd.resample_probability, 1e6, ranges,
        )  # fmt: skip
        check_pbt_memory(cfg, cmd.population, ranges, cmd.checkpoint_every > 0)
        run_dir = Path(cmd.run_dir or f"runs/pbt-{time.strftime('%Y%m%d-%H%M%S')}")
        population, chunked = cmd.population, cmd.checkpoint_every > 0
    compile_cache(cmd)
    mesh = mesh_of(cmd.devices)
    main_process = jax.process_index() == 0
    mode = "resume" if cmd.resume else "overwrite" if cmd.overwrite else "new"
    owner = claim(run_dir, mode) if main_process else contextlib.nullcontext()
    trackers = trackers_of(cmd, run_dir if cmd.resume else None)
    with owner, StopOnSignal(run_dir if chunked else None, "pbt") as stop, hold_finish() as held:
        bar = ProgressBar(cfg, population) if cmd.progress and main_process else None
        say(
            f"purejaxppo pbt: {env_name(cfg)} | population {population} × "
            f"{cfg.total_timesteps:,} steps = {cfg.num_updates} updates | backend "
            f"{devices_line()} | run dir {run_dir}",
            main_process,
        )
        say(compiling(cmd.progress), main_process)
        options = dict(mesh=mesh, progress=bar, progress_every=cmd.progress_every, tracker=trackers)
        if chunked:  # the results, with the whole sitting's timings, are written below
            options.update(should_stop=stop, write_results=False)
        if cmd.stop_at is not None:
            options["stop_at"] = cmd.stop_at
        t0 = time.perf_counter()
        if cmd.resume:
            res = resume_pbt(run_dir, **options)
        else:
            if chunked:
                options.update(run_dir=run_dir, checkpoint_every=cmd.checkpoint_every)
                options["overwrite"] = cmd.overwrite
            res = pbt(
                cfg, cmd.population, interval=cmd.interval, fraction=cmd.fraction,
                factors=cmd.factors, resample_probability=cmd.resample_probability,
                seed=cmd.seed, group_size=cmd.group_size, **options, **ranges,
            )  # fmt: skip
        if bar is not None:
            bar.close()
        if not res.finished:
            return stop.stopped(cmd.stop_at, main_process, "a generation")
        if main_process:
            from ..rundir import write_pbt_run

            timings = {**res.timings, "total_s": time.perf_counter() - t0}
            print(write_pbt_run(run_dir, res, timings))
            finish_held(held, run_dir)  # the trackers' lineage, figures and summary
            print(f"run directory: {run_dir}")
    return 0
