"""Command line (tyro): ``purejaxppo train | sweep | pbt | eval | bench``.

Every `PPOConfig` field is a flag (``--lr 1e-3``, ``--maze easy``, ``--mlp-widths 64 64``),
documented in ``--help`` from the field's docstring; ``--config FILE.yaml|json`` sets any of
them from a file (flags given on the command line win). ``train`` and ``sweep`` write a run
directory (see `purejaxppo._rundir`), ``pbt`` a PBT run directory (`purejaxppo._pbt_run`);
``eval RUN_DIR`` evaluates it; ``bench`` prints a table
of compile time and steps/s at several agent counts (``--suite gpu`` for the GPU benchmark).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Literal, Union

import tyro

from ._config import INIT_ONLY_FIELDS, TRACED_FIELDS, PPOConfig
from ._cpu_devices import requested_cpu_devices

# -------------------------------------------------------------------- flags from PPOConfig ---
#: Flag types that differ from the field's annotation: a maze layout (rows of characters)
#: comes from a --config file, so the flag takes a name. Every other flag has its field's
#: own annotated type, so a new field is a flag without touching this module.
_CLI_TYPE_OVERRIDES: dict[str, Any] = {"maze": str | None}


def _flag_type(name: str) -> Any:
    import typing

    hints = typing.get_type_hints(PPOConfig)
    return _CLI_TYPE_OVERRIDES.get(name, hints[name])


def _field_doc(name: str) -> str:
    import ast
    import inspect

    # Field docstrings are the string literal after each field in the class body.
    body = ast.parse(inspect.getsource(PPOConfig)).body[0].body
    for a, b in zip(body, body[1:], strict=False):
        if isinstance(a, ast.AnnAssign) and getattr(a.target, "id", None) == name:
            if isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant):
                return " ".join(str(b.value.value).replace("``", "").split())
    return ""


def _config_fields() -> list:
    out = []
    for f in dataclasses.fields(PPOConfig):
        kind = _flag_type(f.name)
        help_ = _field_doc(f.name) + (" [vmappable]" if f.name in TRACED_FIELDS else "")
        out.append((f.name, Annotated[kind, tyro.conf.arg(help=help_)], f.default))
    return [(n, t, dataclasses.field(default=d)) for n, t, d in out]


ConfigFlags = dataclasses.make_dataclass("ConfigFlags", _config_fields(), frozen=True)
ConfigFlags.__doc__ = "PPOConfig fields (defaults: the seed system's medium maze)."

_SWEEPABLE_INT = ("num_envs", "num_steps", "total_timesteps", "update_epochs", "minibatch_size")
SweepAxes = dataclasses.make_dataclass(
    "SweepAxes",
    [
        (n, Annotated[list[float] | None, tyro.conf.arg(help=f"values of {n} (vmapped)")], None)
        for n in TRACED_FIELDS
    ]
    + [
        (
            n,
            Annotated[
                list[int] | None,
                tyro.conf.arg(help=f"values of {n} (static: one program per value)"),
            ],
            None,
        )
        for n in _SWEEPABLE_INT
    ],  # fmt: skip
    frozen=True,
)
SweepAxes.__doc__ = "Swept fields: a list of values each (grid) or low high (random search)."


@dataclasses.dataclass(frozen=True)
class RunFlags:
    seeds: int = 1
    """Number of seeds (agents per setting); seeds are seed, seed+1, ..."""
    seed: int = 0
    """First seed (PRNGKey(seed))."""
    run_dir: str | None = None
    """Run directory to write (default: runs/<command>-<time>)."""
    checkpoint_every: int | None = None
    """Train in chunks of this many updates with an atomic checkpoint after each. Default:
    about a tenth of the run per chunk, at most ~60 s each, so SIGTERM stops at the next
    chunk with a checkpoint. 0: one program, no checkpoints (a signal then stops at once
    and the run is lost). Chunking never changes results."""
    resume: str | None = None
    """Continue the checkpointed run in this directory, from its newest intact checkpoint
    (its own config, seeds and sweep are used; flags that would change them are refused)."""
    overwrite: bool = False
    """Replace the run already in --run-dir (without it, such a directory is refused)."""
    stop_at: int | None = None
    """Stop at the first checkpoint at or past this many env steps per agent; --resume then
    goes on towards --total-timesteps."""
    config: str | None = None
    """YAML or JSON file of config fields (command-line flags override it)."""
    progress: bool = True
    """Show a progress bar (one host callback per update for all agents together)."""
    progress_every: int = 1
    """Updates between progress callbacks."""
    eval_episodes: int = 32
    """Fresh greedy episodes per agent for the success rate in summary.md (0: skip)."""
    gif: bool = True
    """Write agent.gif of the best agent."""
    tensorboard: bool = False
    """Also write TensorBoard logs to RUN_DIR/tb (needs tensorboardX: pip install .[tb])."""
    devices: int | None = None
    """Shard the agents over this many devices (default: all; 1: no sharding)."""
    group_size: int | None = None
    """Agents vmapped together on each device, the groups running one after another in the
    one program (default: the backend's, a few at a time on CPU, all on GPU/TPU)."""
    compile_cache: bool = True
    """Keep compiled programs in JAX's persistent compilation cache, so a second run of the
    same config skips the compile (results are bit-identical)."""
    compile_cache_dir: str | None = None
    """The cache's directory (default: $PUREJAXPPO_CACHE_DIR, else ~/.cache/purejaxppo/xla)."""
    distributed: bool = False
    """Call jax.distributed.initialize() first (multi-host; every host runs the same command)."""
    coordinator_address: str | None = None
    """host:port of process 0, for --distributed (default: from the cluster environment)."""
    num_processes: int | None = None
    """Number of processes, for --distributed (default: from the cluster environment)."""
    process_id: int | None = None
    """This process's index, for --distributed (default: from the cluster environment)."""


@dataclasses.dataclass(frozen=True)
class TrainCmd(ConfigFlags, RunFlags):
    """Train one config, for one or more seeds, and write a run directory."""


@dataclasses.dataclass(frozen=True)
class SweepCmd(ConfigFlags, RunFlags):
    """Grid or random search over hyperparameters and seeds, in one program per static
    setting; e.g. --sweep.lr 1e-4 3e-4 1e-3 --seeds 64."""

    sweep: SweepAxes = dataclasses.field(default_factory=SweepAxes)
    search: Literal["grid", "random"] = "grid"
    """grid: every combination; random: --num-samples draws from each field's [low, high]."""
    num_samples: int | None = None
    """Random-search samples."""


PBTRanges = dataclasses.make_dataclass(
    "PBTRanges",
    [
        (
            n,
            Annotated[
                tuple[float, float] | None,
                tyro.conf.arg(help=f"initial range and bounds of {n}: LOW HIGH"),
            ],
            None,
        )
        for n in TRACED_FIELDS
        if n not in INIT_ONLY_FIELDS
    ],
    frozen=True,
)
PBTRanges.__doc__ = "Tuned fields: LOW HIGH each (log-uniform for lr and adam_eps)."


@dataclasses.dataclass(frozen=True)
class PBTCmd(ConfigFlags):
    """Population-based training in one program: every --interval updates the bottom
    --fraction copies the top --fraction and perturbs; e.g. --pbt.lr 1e-5 1e-2."""

    pbt: PBTRanges = dataclasses.field(default_factory=PBTRanges)
    population: int = 64
    """Agents in the population (at least 2)."""
    interval: int = 10
    """Updates between exploit/explore steps."""
    fraction: float = 0.25
    """Bottom fraction replaced by copies of the top fraction, in (0, 0.5]."""
    factors: tuple[float, ...] = (0.8, 1.25)
    """Perturbation factors (each > 0), one drawn uniformly per field and child."""
    resample_probability: float = 0.25
    """Probability of drawing a child's field afresh from its range instead."""
    seed: int = 0
    """Fixes the agents' keys, the initial draws and every PBT draw."""
    run_dir: str | None = None
    """Run directory to write (default: runs/pbt-<time>)."""
    checkpoint_every: int = 1
    """Generations per checkpoint (0: one program, no checkpoints)."""
    resume: str | None = None
    """Continue the checkpointed PBT run in this directory (its own pbt.json is used)."""
    overwrite: bool = False
    """Replace the run already in --run-dir."""
    config: str | None = None
    """YAML or JSON file of config fields (command-line flags override it)."""
    progress: bool = True
    """Show a progress bar."""
    progress_every: int = 1
    """Updates between progress callbacks."""
    devices: int | None = None
    """Shard the population over this many devices (default: all; 1: no sharding)."""
    group_size: int | None = None
    """Agents vmapped together on each device (default: the backend's)."""
    compile_cache: bool = True
    """Keep compiled programs in JAX's persistent compilation cache, so a second run of the
    same config skips the compile (results are bit-identical)."""
    compile_cache_dir: str | None = None
    """The cache's directory (default: $PUREJAXPPO_CACHE_DIR, else ~/.cache/purejaxppo/xla)."""


@dataclasses.dataclass(frozen=True)
class EvalCmd:
    """Evaluate every agent of a run directory (or one) on fresh episodes; optionally a GIF."""

    run_dir: tyro.conf.Positional[str]
    agent: int | None = None
    """Flat index of one agent (row order of the table); default: every agent."""
    episodes: int = 100
    """Episodes per agent."""
    sampled: bool = False
    """Sample actions instead of acting greedily."""
    seed: int = 12_345
    """Evaluation PRNG seed (independent of training)."""
    gif: str | None = None
    """Write a GIF of the chosen (default: best) agent to this path (relative paths are
    inside the run directory)."""


@dataclasses.dataclass(frozen=True)
class BenchCmd(ConfigFlags):
    """Compile seconds and steps/s at several agent counts, as a table."""

    agents: tuple[int, ...] = (1, 4, 16, 64)
    """Agent counts to measure."""
    group_sizes: tuple[int, ...] = ()
    """Also time every count with each of these group widths (agents vmapped together per
    device), e.g. --group-sizes 1 4 16 64; the default width is always timed."""
    updates: int = 2
    """Timed updates per count (after compiling)."""
    suite: Literal["none", "gpu"] = "none"
    """gpu: the GPU benchmark (medium maze, 1/64/256/1024/4096 agents, plus 256 agents'
    full 819,200-step run), sized for about 5 minutes on one GPU."""
    budget_s: float = 300.0
    """Skip counts whose estimated time would exceed what is left of this budget."""
    devices: int | None = None
    """Shard over this many devices (default: all)."""


# ---------------------------------------------------------------------------------- main ---
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        requested_cpu_devices()  # read at import; refused here, before anything else
        defaults = _file_defaults(argv)
    except (OSError, ValueError) as e:
        print(f"purejaxppo: {e}", file=sys.stderr)
        return 2
    Command = Union[  # noqa: UP007 - tyro needs the Union of annotated subcommands
        Annotated[TrainCmd, tyro.conf.subcommand("train", default=TrainCmd(**defaults))],
        Annotated[SweepCmd, tyro.conf.subcommand("sweep", default=SweepCmd(**defaults))],
        Annotated[PBTCmd, tyro.conf.subcommand("pbt", default=PBTCmd(**defaults))],
        Annotated[EvalCmd, tyro.conf.subcommand("eval")],
        Annotated[BenchCmd, tyro.conf.subcommand("bench", default=BenchCmd(**defaults))],
    ]
    cmd = tyro.cli(Command, args=argv, prog="purejaxppo", description=__doc__.split("\n")[0])
    with _one_line_warnings():
        try:
            if isinstance(cmd, EvalCmd):
                return _eval(cmd)
            if isinstance(cmd, BenchCmd):
                return _bench(cmd)
            if isinstance(cmd, PBTCmd):
                return _pbt(cmd, argv)
            return _train(cmd, argv)
        except (ValueError, TypeError, FileNotFoundError) as e:
            print(f"purejaxppo {argv[0]}: {e}", file=sys.stderr)
            return 2


@contextlib.contextmanager
def _one_line_warnings():
    """Our own warnings (a damaged checkpoint skipped, a stale lock) as one line each."""
    import warnings

    from ._ownership import RunDirWarning

    old = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, RunDirWarning):
            print(f"purejaxppo: warning: {message}", file=sys.stderr, flush=True)
        else:
            old(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = old


def _file_defaults(argv: list[str]) -> dict:
    """Config-file values (``--config FILE``), checked against the PPOConfig fields."""
    if "--config" not in argv:
        return {}
    i = argv.index("--config")
    if i + 1 >= len(argv):
        raise ValueError("--config needs a file path.")
    path = Path(argv[i + 1])
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"--config {path}: cannot read it ({e}).") from e
    if path.suffix in (".yaml", ".yml"):
        import yaml

        try:
            data = yaml.safe_load(text) or {}
        except yaml.YAMLError as e:
            where = getattr(e, "problem_mark", None)
            at = f" at line {where.line + 1}" if where is not None else ""
            raise ValueError(f"--config {path}: not valid YAML{at}; fix the file.") from e
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(
                f"--config {path}: not valid JSON (line {e.lineno}: {e.msg}); fix the file."
            ) from e
    if not isinstance(data, dict):
        raise ValueError(f"--config {path}: expected a mapping of config fields.")
    per_agent = ("seed", "agent")  # a config file's values serve every seed (every PBT agent)
    swept = [k for k, v in (data.get("axes") or {}).items() if k not in per_agent and len(v) > 1]
    if swept:
        raise ValueError(
            f"--config {path}: this run swept {swept}, and a config file holds one value per "
            'field, so those values would be lost; copy its "config" section to a new file '
            "and set the fields you want (or repeat the sweep with --sweep.<field>)."
        )
    data = data.get("config", data)  # a run directory's config.json works too
    fields = {f.name for f in dataclasses.fields(PPOConfig)}
    unknown = sorted(set(data) - fields)
    if unknown:
        raise ValueError(f"--config {path}: unknown fields {unknown}; fields are {sorted(fields)}.")
    out = {}
    for k, v in data.items():
        if isinstance(v, list):
            v = "\n".join(v) if k == "maze" else tuple(v)
        out[k] = v
    return out  # validated with the flags merged in (a flag may fix a file's value)


def _config_of(cmd) -> PPOConfig:
    values = {f.name: getattr(cmd, f.name) for f in dataclasses.fields(ConfigFlags)}
    if isinstance(values["maze"], str) and "\n" in values["maze"]:
        values["maze"] = tuple(values["maze"].split("\n"))
    return PPOConfig(**values)


# --------------------------------------------------------------------------- train/sweep ---
#: Flags that may be given with --resume: they change how the run is shown, placed or
#: written, never what it trains.
RESUME_FLAGS = {
    "resume", "progress", "no-progress", "progress-every", "eval-episodes", "gif", "no-gif",
    "tensorboard", "no-tensorboard", "devices", "distributed", "no-distributed",
    "coordinator-address", "num-processes", "process-id", "stop-at", "compile-cache",
    "no-compile-cache", "compile-cache-dir",
}  # fmt: skip


def _check_run_flags(cmd, argv: list[str]) -> None:
    """Every run flag, checked before anything compiles (one line each)."""
    if cmd.seeds < 1:
        raise ValueError(f"--seeds {cmd.seeds}: need at least one seed.")
    if cmd.checkpoint_every is not None and cmd.checkpoint_every < 0:
        raise ValueError(f"--checkpoint-every {cmd.checkpoint_every}: use 0 (off) or more.")
    if cmd.stop_at is not None and (cmd.stop_at < 1 or cmd.checkpoint_every == 0):
        raise ValueError(
            f"--stop-at {cmd.stop_at}: give a positive number of env steps, without "
            "--checkpoint-every 0 (a run stops at a checkpoint)."
        )
    if cmd.eval_episodes < 0:
        raise ValueError(f"--eval-episodes {cmd.eval_episodes}: use 0 (skip) or more.")
    if cmd.progress_every < 1:
        raise ValueError(f"--progress-every {cmd.progress_every}: need at least 1.")
    if cmd.group_size is not None and cmd.group_size < 1:
        raise ValueError(
            f"--group-size {cmd.group_size}: need at least 1 agent per group (omit it for the "
            "backend's default)."
        )
    if cmd.tensorboard:
        try:
            import tensorboardX  # noqa: F401
        except ImportError as e:
            raise ValueError(
                "--tensorboard needs tensorboardX: pip install 'purejaxppo[tb]'."
            ) from e
    if cmd.resume:
        given = {a[2:].split("=")[0] for a in argv[1:] if a.startswith("--")}
        refused = sorted(given - RESUME_FLAGS)
        if refused:
            flags = ", ".join(f"--{f}" for f in refused)
            raise ValueError(
                f"--resume continues {cmd.resume} with its own config, seeds and sweep; "
                f"{flags} would change the run and are refused. Drop them, or start a new run "
                "(another --run-dir, or --overwrite)."
            )


def _train(cmd, argv: list[str]) -> int:
    """``purejaxppo train | sweep``: every check (flags, config, axes, memory) passes before
    anything is printed, written or compiled."""
    import jax

    _check_run_flags(cmd, argv)
    name = "sweep" if isinstance(cmd, SweepCmd) else "train"
    if cmd.resume:
        info = _resumable(cmd.resume, name)
        if info is None:
            return 0  # finished: nothing to do
    if cmd.distributed:
        jax.distributed.initialize(cmd.coordinator_address, cmd.num_processes, cmd.process_id)
    _compile_cache(cmd)
    from ._ownership import claim
    from ._sweep import check_sweep_args

    axes = {}
    if cmd.resume:
        run_dir, cfg, num_agents, name = info.path, info.config, info.num_agents, info.kind
    else:
        if isinstance(cmd, SweepCmd):
            axes = {k: v for k, v in dataclasses.asdict(cmd.sweep).items() if v is not None}
            if not axes:
                raise ValueError("sweep: give at least one --sweep.<field> list (see --help).")
        cfg = _config_of(cmd)
        run_dir = Path(cmd.run_dir or f"runs/{name}-{time.strftime('%Y%m%d-%H%M%S')}")
        search = dict(search=cmd.search, num_samples=cmd.num_samples) if axes else {}
        num_agents = check_sweep_args(  # every swept value and the memory, before compiling
            cfg, cmd.seeds, search.get("search", "grid"), search.get("num_samples"), axes,
            chunked=cmd.checkpoint_every != 0,
        )  # fmt: skip
    mesh = _mesh(cmd.devices)
    main_process = jax.process_index() == 0
    mode = "resume" if cmd.resume else "overwrite" if cmd.overwrite else "new"
    owner = claim(run_dir, mode) if main_process else contextlib.nullcontext()
    chunked = cmd.checkpoint_every != 0 or bool(cmd.resume)
    with owner, _StopOnSignal(run_dir if chunked else None, name) as stop:
        return _train_in(cmd, cfg, axes, run_dir, num_agents, mesh, main_process, stop, name)


def _resumable(run_dir: str, command: str):
    """The `RunInfo` of a run to ``--resume``, or None (said in a line) when it has finished.

    A finished run is left exactly as it is: its results and timings stay those it recorded.
    """
    from ._rundir import describe

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


def _train_in(cmd, cfg, axes, run_dir, num_agents, mesh, main_process, stop, name) -> int:
    """The run itself, with ``run_dir`` owned and signals watched."""
    import jax

    from ._sweep import resume_sweep, sweep

    bar = ProgressBar(cfg, num_agents) if cmd.progress and main_process else None
    _say(
        f"purejaxppo {name}: {_env_name(cfg)} | {num_agents} agent(s) × "
        f"{cfg.total_timesteps:,} steps = {cfg.num_updates} updates × {cfg.num_envs} envs × "
        f"{cfg.num_steps} steps | backend {jax.default_backend()} × {jax.device_count()} "
        f"device(s) | run dir {run_dir}",
        main_process,
    )
    _say(COMPILING, main_process and cmd.progress)
    chunked = stop.run_dir is not None
    options = dict(mesh=mesh, progress=bar, progress_every=cmd.progress_every)
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
        why = stop.signal or f"--stop-at {cmd.stop_at}"
        _say(
            f"{why}: stopped at a chunk boundary with a checkpoint in {run_dir}.\n"
            f"resume with: purejaxppo {name} --resume {run_dir}",
            main_process,
        )
        if stop.signal is None:
            return 0  # stopped where asked: not a failure
        return 130 if stop.signal == "SIGINT" else 143
    timings = {**result.timings, "total_s": total}
    if main_process:
        from ._rundir import write_run, write_tensorboard

        try:
            rows = write_run(
                run_dir, result, timings=timings, eval_episodes=cmd.eval_episodes,
                gif=cmd.gif, overwrite=True, log=_log,  # the claim above made the checks
            )  # fmt: skip
            if cmd.tensorboard:
                write_tensorboard(run_dir / "tb", result)
        except OSError as e:
            raise ValueError(_write_failure(e, run_dir, name, chunked)) from e
        _print_summary(cfg, result, rows, timings, run_dir)
    return 0


def _compile_cache(cmd) -> None:
    """JAX's persistent compilation cache, on unless --no-compile-cache (before any compile)."""
    if cmd.compile_cache:
        from ._cache import enable_compilation_cache

        enable_compilation_cache(cmd.compile_cache_dir)


def _write_failure(e: OSError, run_dir: Path, name: str, chunked: bool) -> str:
    """One line for a write that failed mid-run (a full disk, a vanished mount)."""
    from ._checkpoint import checkpoints

    where = e.filename or run_dir
    found = checkpoints(run_dir) or sorted(Path(run_dir).glob("ckpt-p*.eqx"))
    if chunked and found:
        return (
            f"writing {where} failed ({e.strerror}); the last good checkpoint "
            f"{found[-1].name} is intact: free space, then resume with: "
            f"purejaxppo {name} --resume {run_dir}"
        )
    return f"writing {where} failed ({e.strerror}); nothing to resume from: free space and rerun."


def _mesh(devices: int | None):
    import jax

    from ._engine import agent_mesh

    if devices is None:
        return None
    if devices < 1 or devices > jax.device_count():
        raise ValueError(
            f"--devices {devices}: this process sees {jax.device_count()} device(s); "
            f"give 1..{jax.device_count()}."
        )
    return False if devices == 1 else agent_mesh(jax.devices()[:devices])


def _print_summary(cfg, result, rows, timings, run_dir) -> None:
    import numpy as np

    print("\nsummary")
    means = [r["return_mean"] for r in rows if r["return_mean"] is not None]
    if means:  # the one definition, as in summary.md
        print(f"  final return (each seed's mean over its last 10 updates) {np.mean(means):.4f}")
    n = int(np.prod(result.shape))
    print(f"  agents                            {n}")
    print(f"  env steps per agent               {cfg.total_timesteps:,}")
    from ._rundir import steps_trained

    if timings["run_s"] > 0:
        steps = steps_trained(result) / timings["run_s"]
        print(f"  steps/s (this sitting, run only)  {steps:,.0f}")
    print(f"  compile s                         {timings['compile_s']:.2f}")
    print(f"  run s                             {timings['run_s']:.2f}")
    print(f"  total s                           {timings['total_s']:.2f}")
    for d in result.diverged_agents():
        print(f"  diverged: {d}")
    print(f"\n{(Path(run_dir) / 'summary.md').read_text()}")
    print(f"run directory: {run_dir}")


class ProgressBar:
    """tqdm bar fed by the one-per-update `Progress` callback of the whole population."""

    def __init__(self, cfg: PPOConfig, num_agents: int):
        self.cfg = cfg
        self.steps_per_update = cfg.batch_size * num_agents
        self.bar = None  # made at the first callback, so compilation is not in its clock
        self.start: tuple[float, int] | None = None
        self.best = -math.inf

    def __call__(self, p) -> None:
        from tqdm.auto import tqdm

        update = int(p.update)
        now = time.perf_counter()
        if self.bar is None:
            self.bar = tqdm(total=self.cfg.num_updates, initial=update - 1, unit="update",
                            dynamic_ncols=True, file=sys.stdout)  # fmt: skip
        if self.start is None:
            self.start = (now, update)
        self.bar.update(update - self.bar.n)
        t0, u0 = self.start
        post = {}
        if update > u0:
            post["steps/s"] = f"{(update - u0) * self.steps_per_update / (now - t0):,.0f}"
        mean = float(p.return_mean)
        if not math.isnan(mean):
            self.best = max(self.best, float(p.return_max))
            post["return"] = f"{mean:.3f}"
        if self.best > -math.inf:
            post["best"] = f"{self.best:.3f}"
        if int(p.diverged):
            post["diverged"] = int(p.diverged)
        self.bar.set_postfix(post, refresh=False)
        if update == self.cfg.num_updates:
            self.bar.refresh()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class _StopOnSignal:
    """SIGINT/SIGTERM during a run.

    Chunked (a run directory with checkpoints): the first signal sets a flag that the chunk
    loop polls, so the run stops at the end of the chunk with a checkpoint; a second one
    stops at once, losing the updates since the last checkpoint. Unchunked
    (``--checkpoint-every 0``): the first signal stops at once and says the run is lost.

    A compiled program does not return to Python until it ends, so a Python signal handler
    would only run then; the signal is read from `signal.set_wakeup_fd` by a watcher thread
    instead, which can stop the process while the program runs.
    """

    def __init__(self, run_dir: Path | None, name: str):
        self.run_dir = run_dir
        self.name = name
        self.signal = None

    def __call__(self) -> bool:
        return self.signal is not None

    def __enter__(self):
        import signal
        import threading

        import jax

        self._read, self._write = os.pipe()
        os.set_blocking(self._write, False)
        signals = (signal.SIGINT, signal.SIGTERM)
        self.old = {s: signal.signal(s, lambda *_: None) for s in signals}
        self.old_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
        self._main = jax.process_index() == 0
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        import signal

        while True:
            try:
                data = os.read(self._read, 16)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum == 0:  # our own wake-up at exit
                    return
                if signum not in (signal.SIGINT, signal.SIGTERM):
                    continue  # another handler's signal (e.g. a test runner's SIGALRM)
                name = signal.Signals(signum).name
                code = 130 if name == "SIGINT" else 143
                if self.run_dir is not None and self.signal is None:
                    self.signal = name
                    self._say(
                        f"\n{name}: stopping at the end of this chunk, with a checkpoint "
                        "(send it again to stop at once, losing this chunk)..."
                    )
                    continue
                lost = (
                    f"updates since the last checkpoint in {self.run_dir} are lost; resume "
                    f"with: purejaxppo {self.name} --resume {self.run_dir}"
                    if self.run_dir is not None
                    else "no checkpoints (--checkpoint-every 0), so this run's training is lost"
                )
                self._say(f"\n{name}: stopping now; {lost}.")
                os._exit(code)

    def _say(self, text: str) -> None:
        if self._main:
            print(text, file=sys.stderr, flush=True)

    def __exit__(self, *exc):
        import signal

        signal.set_wakeup_fd(self.old_fd)
        for s, h in self.old.items():
            signal.signal(s, h)
        os.write(self._write, b"\0")  # wake the watcher so it exits
        self._thread.join(timeout=1)
        os.close(self._write)
        os.close(self._read)


# ----------------------------------------------------------------------------------- pbt ---
#: Flags `pbt --resume` accepts: they change how the run is shown or placed, not what it trains.
PBT_RESUME_FLAGS = {
    "resume", "progress", "no-progress", "progress-every", "devices", "compile-cache",
    "no-compile-cache", "compile-cache-dir",
}  # fmt: skip


def _pbt(cmd: PBTCmd, argv: list[str]) -> int:
    """``purejaxppo pbt``: every argument checked (exit 2) before anything compiles."""
    import jax

    from ._ownership import claim
    from ._pbt import check_pbt_args, check_pbt_memory, pbt, resume_pbt

    if cmd.checkpoint_every < 0:
        raise ValueError(f"--checkpoint-every {cmd.checkpoint_every}: use 0 (off) or more.")
    if cmd.progress_every < 1:
        raise ValueError(f"--progress-every {cmd.progress_every}: need at least 1.")
    if cmd.group_size is not None and cmd.group_size < 1:
        raise ValueError(f"--group-size {cmd.group_size}: need at least 1 agent per group.")
    if cmd.resume:
        given = {a[2:].split("=")[0] for a in argv[1:] if a.startswith("--")}
        refused = sorted(given - PBT_RESUME_FLAGS)
        if refused:
            raise ValueError(
                f"--resume continues {cmd.resume} with its own config and PBT settings; "
                f"{', '.join('--' + f for f in refused)} would change the run and are refused."
            )
        info = _resumable(cmd.resume, "pbt")
        if info is None:
            return 0  # finished: nothing to do
        run_dir, cfg, population, chunked = info.path, info.config, info.num_agents, True
    else:
        cfg = _config_of(cmd)
        ranges = {k: v for k, v in dataclasses.asdict(cmd.pbt).items() if v is not None}
        check_pbt_args(
            cfg, cmd.population, cmd.interval, "truncation", cmd.fraction, "perturb",
            cmd.factors, cmd.resample_probability, 1e6, ranges,
        )  # fmt: skip
        check_pbt_memory(cfg, cmd.population, ranges, cmd.checkpoint_every > 0)
        run_dir = Path(cmd.run_dir or f"runs/pbt-{time.strftime('%Y%m%d-%H%M%S')}")
        population, chunked = cmd.population, cmd.checkpoint_every > 0
    _compile_cache(cmd)
    mesh = _mesh(cmd.devices)
    main_process = jax.process_index() == 0
    mode = "resume" if cmd.resume else "overwrite" if cmd.overwrite else "new"
    owner = claim(run_dir, mode) if main_process else contextlib.nullcontext()
    with owner, _StopOnSignal(run_dir if chunked else None, "pbt") as stop:
        bar = ProgressBar(cfg, population) if cmd.progress and main_process else None
        _say(
            f"purejaxppo pbt: {_env_name(cfg)} | population {population} × "
            f"{cfg.total_timesteps:,} steps = {cfg.num_updates} updates | backend "
            f"{jax.default_backend()} × {jax.device_count()} device(s) | run dir {run_dir}",
            main_process,
        )
        _say(COMPILING, main_process and cmd.progress)
        options = dict(mesh=mesh, progress=bar, progress_every=cmd.progress_every)
        if chunked:  # the results, with the whole sitting's timings, are written below
            options.update(should_stop=stop, write_results=False)
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
            _say(
                f"{stop.signal}: stopped at a generation with a checkpoint in {run_dir}.\n"
                f"resume with: purejaxppo pbt --resume {run_dir}",
                main_process,
            )
            return 130 if stop.signal == "SIGINT" else 143
        if main_process:
            from ._pbt_run import write_pbt_run

            timings = {**res.timings, "total_s": time.perf_counter() - t0}
            print(write_pbt_run(run_dir, res, timings))
            print(f"run directory: {run_dir}")
    return 0


# ---------------------------------------------------------------------------------- eval ---
def _eval(cmd: EvalCmd) -> int:
    """``purejaxppo eval RUN_DIR``: every agent of a sweep or a PBT run (a PBT agent with its
    final hyperparameters), on fresh episodes."""
    import jax
    import numpy as np

    from ._axes import coords_of, flat_index, split_program, static_setting
    from ._distributions import policy_distribution
    from ._evaluate import evaluate, has_success, policy_of
    from ._figures import write_gif
    from ._rundir import load_agents, read_run
    from .envs import make_env

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
        from ._ownership import claim

        c = cfg.replace(**static_setting(axes, index))
        params, norm = agents[program]
        policy = policy_of(params, local, dist=policy_distribution(c, make_env(c)), obs_norm=norm)
        with claim(cmd.run_dir, "results"):  # never while a run writes the directory
            frames = write_gif(path, c, policy, jax.random.PRNGKey(cmd.seed + 1), log=_log)
        print(f"wrote {path}: agent {i}, {frames} frames")
    return 0


def _log(text: str) -> None:
    print(text, flush=True)


# --------------------------------------------------------------------------------- bench ---
GPU_SUITE_AGENTS = (1, 64, 256, 1024, 4096)


def _bench(cmd: BenchCmd) -> int:
    import jax

    from ._bench import time_full_run, time_updates
    from ._engine import Engine, mesh_for

    cfg = PPOConfig() if cmd.suite == "gpu" else _config_of(cmd)
    counts = GPU_SUITE_AGENTS if cmd.suite == "gpu" else cmd.agents
    if cmd.updates < 1 or any(a < 1 for a in counts):
        raise ValueError("bench: --updates and every --agents count must be positive.")
    if any(g < 1 for g in cmd.group_sizes):
        raise ValueError("bench: every --group-sizes width must be positive.")
    mesh = _mesh(cmd.devices)
    print(
        f"purejaxppo bench: {cfg.env} maze={_maze_name(cfg)}, {cfg.batch_size:,} steps/update "
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
        estimate = 0.0 if row is None else row.compile_s * 1.5 + row.update_s * cfg.num_updates
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


# ------------------------------------------------------------------------------- helpers ---
def _maze_name(cfg: PPOConfig) -> str:
    spec = cfg.maze_spec
    return spec if isinstance(spec, str) or spec is None else "custom"


def _env_name(cfg: PPOConfig) -> str:
    """The env as the banner names it: the maze too, for Maze-v0."""
    return f"{cfg.env} maze={_maze_name(cfg)}" if cfg.env == "Maze-v0" else cfg.env


#: Said between the banner and the progress bar's first update, which comes after compiling.
COMPILING = "compiling (the progress bar starts with the first update; cached for next time) ..."


def _say(text: str, main_process: bool) -> None:
    if main_process:
        print(text, flush=True)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
