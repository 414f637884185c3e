"""The flags: every `PPOConfig` field (its annotated type, its docstring as help), and each
command's own, as frozen dataclasses that tyro turns into ``--help`` and parses."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal

import tyro

from .._config import INIT_ONLY_FIELDS, TRACED_FIELDS, PPOConfig

#: Flag types that differ from the field's annotation: a maze layout (rows of characters)
#: comes from a --config file, so the flag takes a name; an env is a name or an import path
#: (an env object exists only in Python). Every other flag has its field's own annotated
#: type, so a new field is a flag without touching this module.
_CLI_TYPE_OVERRIDES: dict[str, Any] = {"maze": str | None, "env": str}


def flag_type(name: str) -> Any:
    import typing

    hints = typing.get_type_hints(PPOConfig)
    return _CLI_TYPE_OVERRIDES.get(name, hints[name])


def _field_doc(name: str) -> str:
    import ast
    import inspect

    # Field docstrings are the string literal after each field in the class body: PPOConfig's
    # own, or its base's (the env options, `purejaxppo.envs.EnvOptions`).
    for cls in PPOConfig.__mro__:
        if not cls.__module__.startswith("purejaxppo."):
            continue
        body = ast.parse(inspect.getsource(cls)).body[0].body
        for a, b in zip(body, body[1:], strict=False):
            if isinstance(a, ast.AnnAssign) and getattr(a.target, "id", None) == name:
                if isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant):
                    return " ".join(str(b.value.value).replace("``", "").split())
    return ""


def _config_fields() -> list:
    out = []
    for f in dataclasses.fields(PPOConfig):
        kind = flag_type(f.name)
        help_ = _field_doc(f.name) + (" [vmappable]" if f.name in TRACED_FIELDS else "")
        out.append((f.name, Annotated[kind, tyro.conf.arg(help=help_)], f.default))
    return [(n, t, dataclasses.field(default=d)) for n, t, d in out]


ConfigFlags = dataclasses.make_dataclass("ConfigFlags", _config_fields(), frozen=True)
ConfigFlags.__doc__ = "PPOConfig fields (defaults: the reference's medium maze)."

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
class RunDirFlags:
    """Flags of every training command (train, sweep, pbt): where the run goes and how it
    is shown; the same name means the same thing in each."""

    run_dir: str | None = None
    """Run directory to write (default: runs/<command>-<time>)."""
    resume: str | None = None
    """Continue the checkpointed run in this directory, from its newest intact checkpoint
    (its own config, seeds and settings are used; flags that would change them are
    refused). A finished run is left as it is."""
    overwrite: bool = False
    """Replace the run already in --run-dir (without it, such a directory is refused)."""
    stop_at: int | None = None
    """Stop at the first checkpoint at or past this many env steps per agent; --resume then
    goes on towards --total-timesteps."""
    config: str | None = None
    """YAML or JSON file of config fields (command-line flags override it)."""
    progress: bool = True
    """Show a progress bar (fed with every update for all agents together)."""
    progress_every: int = 1
    """Show (and track) every K-th update only."""
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
    tensorboard: bool = False
    """Log every agent to TensorBoard in RUN_DIR/tb as it trains, one TensorBoard run per
    agent (needs tensorboardX: pip install 'purejaxppo[tb]')."""
    wandb: str | None = None
    """Log every agent to Weights & Biases in this project, one W&B run per agent, grouped
    (needs pip install 'purejaxppo[wandb]'). --resume continues the same W&B runs."""
    wandb_entity: str | None = None
    """The W&B team or user (default: yours)."""
    wandb_group: str | None = None
    """The W&B group of this run's agents (default: the run directory's name)."""
    wandb_mode: Literal["online", "offline", "disabled"] | None = None
    """online, offline (files under RUN_DIR/wandb; `wandb sync` uploads them later) or
    disabled (default: W&B's own, $WANDB_MODE)."""
    wandb_tags: tuple[str, ...] = ()
    """Tags of every W&B run."""
    wandb_requirements: bool = False
    """Also list every installed package in the group's first W&B run (requirements.txt,
    ~70 ms of CPU); each run's config has the versions of jax, purejaxppo and the like."""
    track_every: str = "auto"
    """Updates between the trackers' writes (--wandb, --tensorboard), or auto: every update
    while writing costs under 1 % of the run's time, else every k-th (the last always; the
    run directory keeps every update)."""


@dataclasses.dataclass(frozen=True)
class RunFlags(RunDirFlags):
    """Flags of train and sweep."""

    seeds: int = 1
    """Number of seeds (agents per setting); seeds are seed, seed+1, ..."""
    seed: int = 0
    """First seed (PRNGKey(seed))."""
    checkpoint_every: int | None = None
    """Train in chunks of this many updates with an atomic checkpoint after each. Default:
    about a tenth of the run per chunk, at most ~60 s each, so SIGTERM stops at the next
    chunk with a checkpoint. 0: one program, no checkpoints (a signal then stops at once
    and the run is lost). Chunking never changes results."""
    eval_episodes: int = 32
    """Fresh greedy episodes per agent for the success rate in summary.md (0: skip)."""
    gif: bool = True
    """Write agent.gif of the best agent."""
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
class PBTCmd(ConfigFlags, RunDirFlags):
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
    checkpoint_every: int = 1
    """Generations per checkpoint (0: one program, no checkpoints)."""


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
    suite: Literal["none", "scaling", "gpu"] = "none"
    """scaling: many agents on one device, any backend (medium maze at 1/64/256/1024/4096
    agents, 256 agents' full 819,200-step run, then PureJaxRL's CartPole config at
    1/256/2048 agents), sized for about 5 minutes on a TPU v5e chip; gpu: its old name."""
    budget_s: float = 300.0
    """Skip counts whose estimated time would exceed what is left of this budget."""
    devices: int | None = None
    """Shard over this many devices (default: all)."""
