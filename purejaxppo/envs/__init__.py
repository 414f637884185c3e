"""Environments: the interface the trainer sees, the env adapters, and the registry of names.

* `Env` / `EnvStep`: one environment with auto-reset and encoded observations.
* `JumanjiMaze` (Maze-v0 and its layouts `EASY`, `MEDIUM`, `parse_layout`), `JumanjiEnv`
  (any other Jumanji env with (multi-)discrete actions: `ENCODERS`, `action_layout`),
  `GymnaxEnv` (`GYMNAX_ENVS`), and the `TimeInput` wrapper.
* `OwnEnv`: your own environment where a config names one (an object: a gymnax-style env,
  ``(env, params)`` or an `Env`; or an import path ``"package.module:attr"``).
* `masked_slices(step)`: an env's step with its per-env indexed reads (dynamic slices; with
  ``points=True`` also gathers and scatters at one index) as masks, the same values: what a
  TPU runs fast under `vmap` (Craftax's step uses it there).
* `make_env(cfg)` builds what a config names (any object with the `EnvOptions` fields);
  `check_env` checks every env option; `SUPPORTED_ENVS` lists the tested names.

To get an encoded observation and mask for a `Policy` outside training::

    env = make_env(cfg)
    state, obs, mask = env.reset(jax.random.PRNGKey(0))
    action = policy(obs, mask)
    state, step = env.step(state, action)   # step.obs, step.mask: the next ones
"""

from ._base import Env as Env
from ._base import EnvStep as EnvStep
from ._base import lowering_for as lowering_for
from ._base import lowering_platform as lowering_platform
from ._base import select_tree as select_tree
from ._gymnax import GymnaxEnv as GymnaxEnv
from ._jumanji import ENCODERS as ENCODERS
from ._jumanji import ActionLayout as ActionLayout
from ._jumanji import JumanjiEnv as JumanjiEnv
from ._jumanji import action_layout as action_layout
from ._jumanji import flatten_observation as flatten_observation
from ._options import EnvOptions as EnvOptions
from ._own import OwnEnv as OwnEnv
from ._registry import GYMNAX_ENVS as GYMNAX_ENVS
from ._registry import JUMANJI_ENVS as JUMANJI_ENVS
from ._registry import SUPPORTED_ENVS as SUPPORTED_ENVS
from ._registry import can_render as can_render
from ._registry import check_env as check_env
from ._registry import describe_env as describe_env
from ._registry import make_env as make_env
from ._registry import why_not_drawn as why_not_drawn
from ._slices import masked_slices as masked_slices
from ._wrappers import TimeInput as TimeInput

# Jumanji makes JAX arrays when it is imported, which starts JAX's backends, after which
# `jax.distributed.initialize` (the CLI's --distributed) is refused: the maze names load it
# on first use.
_LAZY = {
    "EASY": "._layouts",
    "MEDIUM": "._layouts",
    "MazeLayout": "._layouts",
    "parse_layout": "._layouts",
    "JumanjiMaze": "._maze",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
