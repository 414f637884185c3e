"""The checks every training command shares, made before anything is printed, written or
compiled, and the options they set up (the device mesh, the compilation cache)."""

from __future__ import annotations

#: Flags that may be given with --resume: they change how the run is shown, placed or
#: written, never what it trains.
RESUME_FLAGS = {
    "resume", "progress", "no-progress", "progress-every", "eval-episodes", "gif", "no-gif",
    "tensorboard", "no-tensorboard", "devices", "distributed", "no-distributed",
    "coordinator-address", "num-processes", "process-id", "stop-at", "compile-cache",
    "no-compile-cache", "compile-cache-dir", "wandb", "wandb-entity", "wandb-group",
    "wandb-mode", "wandb-tags", "wandb-requirements", "no-wandb-requirements", "track-every",
}  # fmt: skip


def check_run_flags(cmd, argv: list[str]) -> None:
    """The flags every training command shares (`RunDirFlags`) and, where the command has
    them, train's and sweep's own: one line each, before anything is printed or compiled."""
    if getattr(cmd, "seeds", 1) < 1:
        raise ValueError(f"--seeds {cmd.seeds}: need at least one seed.")
    if cmd.checkpoint_every is not None and cmd.checkpoint_every < 0:
        raise ValueError(f"--checkpoint-every {cmd.checkpoint_every}: use 0 (off) or more.")
    if cmd.stop_at is not None and (cmd.stop_at < 1 or cmd.checkpoint_every == 0):
        raise ValueError(
            f"--stop-at {cmd.stop_at}: give a positive number of env steps, without "
            "--checkpoint-every 0 (a run stops at a checkpoint)."
        )
    if getattr(cmd, "eval_episodes", 0) < 0:
        raise ValueError(f"--eval-episodes {cmd.eval_episodes}: use 0 (skip) or more.")
    if cmd.progress_every < 1:
        raise ValueError(f"--progress-every {cmd.progress_every}: need at least 1.")
    if cmd.group_size is not None and cmd.group_size < 1:
        raise ValueError(
            f"--group-size {cmd.group_size}: need at least 1 agent per group (omit it for the "
            "backend's default)."
        )
    trackers_of(cmd)  # a missing package: one line, before anything compiles
    if cmd.resume:
        given = {a[2:].split("=")[0] for a in argv[1:] if a.startswith("--")}
        refused = sorted(given - RESUME_FLAGS)
        if refused:
            flags = ", ".join(f"--{f}" for f in refused)
            raise ValueError(
                f"--resume continues {cmd.resume} with its own config and settings; "
                f"{flags} would change the run and are refused. Drop them, or start a new run "
                "(another --run-dir, or --overwrite)."
            )


def trackers_of(cmd, run_dir=None) -> list:
    """The trackers the flags ask for (`purejaxppo.tracking`), each usable (its package
    present), else one line naming the flag. With ``run_dir`` (``--resume``), the trackers
    the run was started with continue too (their options are kept in ``tracking.json``)."""
    from ..tracking import TensorBoard, WandB
    from ..tracking._recorder import read_state

    every = cmd.track_every
    if every != "auto":
        if not every.isdigit() or int(every) < 1:
            raise ValueError(f"--track-every {every}: give a positive number of updates or auto.")
        every = int(every)
    kept = read_state(run_dir) if run_dir is not None else {}
    out = []
    tb = kept.get(TensorBoard.name, {}).get("options")
    if cmd.tensorboard or tb:
        out.append(TensorBoard(**tb) if tb and not cmd.tensorboard else TensorBoard(every=every))
    wandb_flags = (cmd.wandb_entity, cmd.wandb_group, cmd.wandb_mode, cmd.wandb_tags,
                   cmd.wandb_requirements)  # fmt: skip
    kept_wandb = kept.get(WandB.name, {}).get("options")
    if cmd.wandb is not None or any(wandb_flags):
        out.append(
            WandB(project=cmd.wandb, entity=cmd.wandb_entity, group=cmd.wandb_group,
                  mode=cmd.wandb_mode, tags=tuple(cmd.wandb_tags), every=every,
                  requirements=cmd.wandb_requirements)
        )  # fmt: skip
    elif kept_wandb:
        out.append(WandB(**{**kept_wandb, "tags": tuple(kept_wandb.get("tags", ()))}))
    for t in out:
        try:
            t.check()
        except ImportError as e:
            flag = "--tensorboard" if isinstance(t, TensorBoard) else "--wandb"
            raise ValueError(f"{flag}: {e}") from None
    return out


def compile_cache(cmd) -> None:
    """JAX's persistent compilation cache, on unless --no-compile-cache (before any compile)."""
    if cmd.compile_cache:
        from .._cache import enable_compilation_cache

        enable_compilation_cache(cmd.compile_cache_dir)


def mesh_of(devices: int | None):
    import jax

    from .._placement import agent_mesh

    if devices is None:
        return None
    if devices < 1 or devices > jax.device_count():
        raise ValueError(
            f"--devices {devices}: this process sees {jax.device_count()} device(s); "
            f"give 1..{jax.device_count()}."
        )
    return False if devices == 1 else agent_mesh(jax.devices()[:devices])
