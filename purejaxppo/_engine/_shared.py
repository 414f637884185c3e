"""`engine_for`: the one `Engine` per static config, placement and group width, shared by
`make_train`, `sweep`, `pbt` and checkpointed runs so that their programs compile once."""

from __future__ import annotations

import jax
from jax.sharding import Mesh

from .._config import PPOConfig
from .._progress import ProgressFn
from ._core import Engine

_ENGINES: dict = {}


def engine_for(
    cfg: PPOConfig,
    mesh: Mesh | None | bool = None,
    progress: ProgressFn | None = None,
    progress_every: int = 1,
    group_size: int | None = None,
    progress_agents: bool = False,
) -> Engine:
    """The shared `Engine` for ``cfg``'s static fields, this placement and group width.

    Configs that differ only in traced hyperparameters run the same programs, so
    `make_train` and `sweep` reuse one engine (and its compiled programs) for them; a new
    ``progress`` function means a new program. Up to 8 engines are kept, and
    `_kept.MAX_PROGRAMS` compiled programs across all of them.
    """
    if mesh is None and jax.device_count() == 1:
        mesh = False  # what `Engine` makes of it: share the engine with explicit False
    mesh_key = mesh if isinstance(mesh, bool) or mesh is None else id(mesh)
    key = (
        tuple(cfg.static_fields().items()),
        cfg.max_grad_norm is None,
        mesh_key,
        jax.device_count() if mesh is None else 0,
        progress,
        progress_every,
        group_size,
        progress_agents,
    )
    if key not in _ENGINES:
        if len(_ENGINES) >= 8:
            _ENGINES.pop(next(iter(_ENGINES)))
        _ENGINES[key] = Engine(
            cfg, mesh=mesh, progress=progress, progress_every=progress_every,
            group_size=group_size, progress_agents=progress_agents,
        )  # fmt: skip
    return _ENGINES[key]
