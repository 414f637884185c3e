"""Environments: the interface the trainer sees, the env adapters, and the registry of names.

* `Env` / `EnvStep`: one environment with auto-reset and encoded observations.
* `JumanjiMaze` (Maze-v0 and its layouts `EASY`, `MEDIUM`, `parse_layout`), `JumanjiEnv`
  (any other Jumanji env with (multi-)discrete actions: `ENCODERS`, `action_layout`),
  `GymnaxEnv` (`GYMNAX_ENVS`), and the `TimeInput` wrapper.
* `make_env(cfg)` builds what a config names; `SUPPORTED_ENVS` lists the tested names.

To get an encoded observation and mask for a `Policy` outside training::

    env = make_env(cfg)
    state, obs, mask = env.reset(jax.random.PRNGKey(0))
    action = policy(obs, mask)
    state, step = env.step(state, action)   # step.obs, step.mask: the next ones
"""

from ._base import Env as Env
from ._base import EnvStep as EnvStep
from ._base import select_tree as select_tree
from ._gymnax import GymnaxEnv as GymnaxEnv
from ._jumanji import ENCODERS as ENCODERS
from ._jumanji import ActionLayout as ActionLayout
from ._jumanji import JumanjiEnv as JumanjiEnv
from ._jumanji import action_layout as action_layout
from ._jumanji import flatten_observation as flatten_observation
from ._layouts import EASY as EASY
from ._layouts import MEDIUM as MEDIUM
from ._layouts import MazeLayout as MazeLayout
from ._layouts import parse_layout as parse_layout
from ._maze import JumanjiMaze as JumanjiMaze
from ._registry import GYMNAX_ENVS as GYMNAX_ENVS
from ._registry import JUMANJI_ENVS as JUMANJI_ENVS
from ._registry import SUPPORTED_ENVS as SUPPORTED_ENVS
from ._registry import can_render as can_render
from ._registry import check_env as check_env
from ._registry import make_env as make_env
from ._wrappers import TimeInput as TimeInput
