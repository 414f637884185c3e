"""The options that choose and shape a config's environment, declared once, here.

`PPOConfig` inherits them (they are its first fields); `check_env` and `make_env` read them
and nothing else, so this package never imports the trainer's config. An `EnvOptions` alone
also builds an env, ``make_env(EnvOptions(env="CartPole-v1"))``, and is checked when made:
a bad option is one line (ValueError) naming the field.
"""

from __future__ import annotations

import equinox as eqx

from ._own import OwnEnv, as_env
from ._registry import check_env

# A maze is a name ("easy", "medium", "random") or a layout given as rows of characters.
MazeSpec = str | tuple[str, ...] | None


class EnvOptions(eqx.Module):
    """Which environment, and its options (frozen; all static: they fix the program)."""

    env: str | OwnEnv = eqx.field(default="Maze-v0", static=True, converter=as_env)
    """The environment: a name (``"Maze-v0"``, the default; another registered Jumanji env
    with a discrete or multi-discrete action, tested: Snake-v1, Game2048-v1, PacMan-v1,
    SlidingTilePuzzle-v0, Minesweeper-v0, Tetris-v0; any of gymnax's registered envs,
    `purejaxppo.envs.GYMNAX_ENVS`, with the ``gymnax`` extra; ``"brax/<name>"``;
    ``"navix/<name>"`` and ``"xminigrid/<name>"``, any of Navix's or XLand-MiniGrid's
    MiniGrid ports, with their extras; ``"xminigrid/XLand-MiniGrid-R1-9x9@trivial-21k"``,
    an XLand env on one of its ruleset benchmarks, on disk; ``"craftax/<name>"``), or your
    own: an environment object (a gymnax-style env, ``(env, params)``, or a
    `purejaxppo.envs.Env`), or ``"package.module:attr"`` naming one or a function returning
    one (see `purejaxppo.envs.OwnEnv`)."""
    maze: MazeSpec = eqx.field(default=None, static=True)
    """For Maze-v0: ``"easy"``, ``"medium"`` (default), ``"random"`` or a layout (rows of
    ``#``/``.``/``S``/``G``). Must be None for other environments."""
    maze_size: tuple[int, int] = eqx.field(default=(10, 10), static=True)
    """(rows, cols) of ``maze="random"``."""
    maze_pool: int = eqx.field(default=64, static=True)
    """For ``maze="random"``: mazes pre-generated per env, drawn at each reset,
    ``maze_refresh`` of them replaced per env per update (0: run Jumanji's generator at
    every reset, ~500x a step's cost under vmap). Bias: training mazes repeat within a pool;
    evaluation always uses fresh ones."""
    maze_refresh: int = eqx.field(default=1, static=True)
    """For ``maze="random"`` with a pool: mazes replaced per env per update (1 to
    ``maze_pool``). More means fewer repeats of each training maze (less to memorise) for
    more generator calls, which run once per update, outside the step loop."""
    maze_view: str = eqx.field(default="full", static=True)
    """For Maze-v0: ``"full"`` (the reference's image: walls, agent, target, H×W),
    ``"egocentric"`` (walls and target, (2H−1)×(2W−1), shifted so the agent is always at the
    centre; outside the maze counts as wall) or ``"local"`` (the egocentric view cut to the
    ``maze_window``×``maze_window`` cells around the agent: a partially observed maze, whose
    target is invisible until the agent is near)."""
    maze_window: int = eqx.field(default=5, static=True)
    """For ``maze_view="local"``: the side of the window (odd, >= 3; the agent is at its
    centre)."""
    maze_visited: bool = eqx.field(default=False, static=True)
    """For Maze-v0: one more plane, the cells the agent has stood on in this episode (in the
    chosen view). The observation has no memory otherwise, and a memoryless greedy policy
    that cannot tell where it has been can step back and forth between two cells until the
    time limit (most of the ``ego-fresh`` preset's failures on fresh mazes did)."""
    memory_length: int | None = eqx.field(default=None, static=True)
    """For MemoryChain-bsuite: steps between the context (shown first) and the query (shown
    last), which the policy must remember across. None: gymnax's default (5)."""
    brax_backend: str = eqx.field(default="positional", static=True)
    """For ``env="brax/<name>"``: Brax's physics pipeline ("positional", "spring",
    "generalized" or "mjx")."""
    time_limit: int | None = eqx.field(default=None, static=True)
    """Episode step limit. None: Jumanji's default (rows × cols for Maze)."""
    time_input: bool = eqx.field(default=False, static=True)
    """Give the network ``t / time_limit`` (one more plane or feature), as Jumanji's own
    Maze network does: Maze reports its time limit as a termination, so this lets the value
    see the deadline. Observations become float32."""

    def __check_init__(self):
        # Every env option, in one place (`check_env`): for a `PPOConfig` too, after its own
        # fields (equinox runs each class's check, the subclass's first).
        check_env(self)

    @property
    def maze_spec(self) -> MazeSpec:
        """The maze actually used: ``maze`` with Maze-v0's default ("medium") filled in."""
        if self.env == "Maze-v0" and self.maze is None:
            return "medium"
        return self.maze
