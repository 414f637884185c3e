"""Reading a run directory back: what it is (`describe`), its results (`read_run`), and its
agents as networks (`load_agents`) or as plain callables (`load_policy`).

Directories written by earlier releases stay readable: a PBT run from before ``params.eqx``
is read from its final checkpoint, and fields added since are filled in.
"""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import numpy as np

from .._axes import index_of, split_program, static_setting
from .._config import PPOConfig, static_field_names
from .._distributions import policy_distribution
from .._evaluate import Policy, policy_of
from .._networks import AbstractActorCritic, network_shapes
from .._normalize import RunningStats, wanted
from ..envs import make_env
from ..envs._registry import with_env
from ._format import (
    PARAMS_FORMAT,
    CheckpointError,
    checkpoints,
    config_from_json,
    header_of,
    params_name,
    read_json,
    read_verified,
)
from ._pbt_files import read_pbt_checkpoint  # a PBT run from before params.eqx


# ------------------------------------------------------------------------------- loaders ---
@dataclasses.dataclass(frozen=True)
class RunInfo:
    """What a run directory holds, read from its small JSON files (nothing is loaded)."""

    path: Path
    kind: str  # "train" (seeds only), "sweep" or "pbt"
    config: PPOConfig  # the run's base config
    num_agents: int
    finished: bool  # every result written (config.json says so)
    done: int  # updates (PBT: generations) in the newest checkpoint; all of them when finished
    total: int  # updates (PBT: generations) of the whole run

    @property
    def resume_command(self) -> str:
        return f"purejaxppo {self.kind} --resume {self.path}"

    @property
    def progress(self) -> str:
        unit = "generation" if self.kind == "pbt" else "update"
        return f"{unit} {self.done} of {self.total}"


def describe(run_dir: str | Path) -> RunInfo:
    """What kind of run ``run_dir`` holds and how far it got, or a `CheckpointError` in one
    line (not a run directory, or a damaged file). The CLI reads run directories only
    through this and the loaders below."""
    path = Path(run_dir)
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such directory; give the run directory to read.")
    meta = _read_config_json(path) if (path / "config.json").exists() else None
    if (path / "pbt.json").exists():
        spec = read_json(path / "pbt.json", "pbt.json")
        kind, num_agents = "pbt", int(spec["population"])
        config = _config_of(spec["config"], path / "pbt.json")
        total = -(-config.num_updates // int(spec["interval"]))
        # a PBT config.json is written only at the end (before 2026-12 without "finished")
        finished = meta is not None and bool(meta.get("finished", True))
    elif (path / "sweep.json").exists():
        spec = read_json(path / "sweep.json", "sweep.json")
        config = _config_of(spec["config"], path / "sweep.json")
        kind = "sweep" if spec["axes"] else "train"
        settings = spec["num_samples"] if spec["search"] == "random" else 1
        for v in spec["axes"].values():
            settings *= len(v) if spec["search"] == "grid" else 1
        num_agents, total = len(spec["seeds"]) * settings, config.num_updates
        finished = meta is not None and bool(meta.get("finished"))
    elif meta is not None:  # results written by `write_run` without checkpoints
        config, axes = meta["config"], meta.get("axes", {})
        kind = "sweep" if set(axes) - {"seed"} else "train"
        num_agents = int(np.prod([len(v) for v in axes.values()]))
        total, finished = config.num_updates, bool(meta.get("finished"))
    else:
        raise CheckpointError(
            f"{path}: no config.json, sweep.json or pbt.json; is this a purejaxppo run directory?"
        )
    done = total if finished else _newest_checkpoint_step(path)
    return RunInfo(path, kind, config, num_agents, finished, done, total)


def _newest_checkpoint_step(path: Path) -> int:

    steps = [header_of(p).get("update", 0) for p in checkpoints(path)]
    return max(steps, default=0)


def _config_of(d: dict, path: Path) -> PPOConfig:
    try:
        return config_from_json(d)
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"{path}: its config is invalid ({e}); restore the file.") from e


def _read_config_json(path: Path) -> dict:
    meta = read_json(path / "config.json", "config.json")
    meta["config"] = _config_of(meta.get("config"), path / "config.json")
    return meta


def read_run(run_dir: str | Path, env: Any = None) -> dict:
    """``config.json`` of a run directory, with ``config`` as a `PPOConfig`, ``axes`` (a PBT
    run's population is the axis ``"agent"``) and ``values`` (per-agent hyperparameters).

    A run that has not finished has no ``config.json`` yet: the error says how to resume it.
    ``env``: the environment object a run was trained on (``config`` then holds it, and one
    other than the recorded one is refused); without it, such a config names it
    ``"object:<module>:<class>"``, which builds no env.
    """
    path = Path(run_dir)
    if not (path / "config.json").exists():
        info = describe(path)  # raises for a directory that holds no run at all
        raise CheckpointError(
            f"{path} holds an interrupted {info.kind} run (checkpointed at {info.progress}), "
            f"so it has no results yet; finish it with: {info.resume_command}"
        )
    meta = _read_config_json(path)
    meta["config"] = with_env(meta["config"], env, meta.get("env"), str(path))
    if "axes" not in meta and (path / "pbt.json").exists():  # PBT, written before 2026-12
        meta.update(_legacy_pbt_meta(path, meta))
    return meta


def _legacy_pbt_meta(path: Path, meta: dict) -> dict:
    """``axes`` and ``values`` of a PBT run directory from before they were recorded: the
    population from ``pbt.json``, the final hyperparameters from ``metrics.npz``."""
    spec = read_json(path / "pbt.json", "pbt.json")
    with np.load(path / "metrics.npz") as npz:
        values = {k[3:]: npz[k][:, -1].tolist() for k in npz.files if k.startswith("hp_")}
    return {"kind": "pbt", "axes": {"agent": list(range(spec["population"]))}, "values": values}


def load_params(run_dir: str | Path) -> list[AbstractActorCritic]:
    """Trained parameters: one stacked network per program (static setting), each with
    leading axes ``(*hyperparameter axes, seed)``. Each file's length and SHA-256 are
    checked first: a truncated or altered ``params.eqx`` is refused, never loaded."""
    return [params for params, _ in load_agents(run_dir)]


def load_agents(
    run_dir: str | Path, env: Any = None
) -> list[tuple[AbstractActorCritic, RunningStats | None]]:
    """`load_params` with each program's frozen observation statistics (None when the run
    did not normalise observations): what `evaluate` and `Policy` need. ``env``: as for
    `read_run`."""
    meta = read_run(run_dir, env)
    cfg, axes = meta["config"], meta["axes"]
    if meta.get("kind") == "pbt" and not (Path(run_dir) / "params.eqx").exists():
        state, _, _ = read_pbt_checkpoint(run_dir)
        return [(state.params, state.obs_norm)]
    static = [len(v) for k, v in axes.items() if k in static_field_names()]
    hyper = [len(v) for k, v in axes.items() if k not in static_field_names()]
    combos = list(np.ndindex(*static))  # one program per static setting ([()]: one)
    out = []
    for i, combo in enumerate(combos):
        c = cfg.replace(**static_setting(axes, (*combo, *[0] * len(hyper))))
        like = _params_like(c, hyper)
        path = Path(run_dir) / params_name(i, len(combos))
        _, payload = read_verified(path, PARAMS_FORMAT, "parameter file")
        try:
            out.append(eqx.tree_deserialise_leaves(io.BytesIO(payload), like))
        except Exception as e:
            raise CheckpointError(
                f"{path} does not match config.json (the network's shapes differ: was "
                "config.json edited?); restore config.json from the run that wrote it."
            ) from e
    return out


def load_policy(run_dir: str | Path, env: Any = None, **coords: Any) -> Policy:
    """One agent of a run as ``policy(obs, mask, key=None) -> action``, picked by its swept
    coordinates (``seed=2``, ``lr=3e-4``; axes of length one may be omitted). ``env``: the
    environment object the run was trained on, if it was one (see `read_run`)."""
    meta = read_run(run_dir, env)
    axes = meta["axes"]
    program, local = split_program(axes, index_of(axes, coords))
    cfg = meta["config"].replace(**static_setting(axes, index_of(axes, coords)))
    params, obs_norm = load_agents(run_dir, env)[program]
    dist = policy_distribution(cfg, make_env(cfg))
    return policy_of(params, local, dist=dist, obs_norm=obs_norm)


def _params_like(cfg: PPOConfig, batch: list[int]) -> tuple:
    env = make_env(cfg)
    one = network_shapes(cfg, env.obs_shape, policy_distribution(cfg, env))
    norm = RunningStats.init(env.obs_shape) if wanted(cfg.normalize_obs, env) else None
    return jax.tree.map(lambda x: np.zeros((*batch, *x.shape), x.dtype), (one, norm))
