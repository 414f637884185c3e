"""Environment names: which exist, how a config's env options are checked, how envs are built.

The config asks `check_env` (before anything is built or compiled) and the trainer asks
`make_env`; neither needs to know which library an env comes from. Both read only the env
options (`EnvOptions`, declared in `_options`), so this package does not depend on the PPO
config: every option of an env is checked here and nowhere else.
"""

from __future__ import annotations

import difflib
import numbers
from typing import TYPE_CHECKING

from .._errors import invalid as _fail
from ._base import Env
from ._gymnax import GymnaxEnv
from ._own import OwnEnv, check_own, own_env
from ._wrappers import TimeInput

if TYPE_CHECKING:  # `_options` calls `check_env` at construction: annotations only here
    from ._options import EnvOptions

#: Values of ``maze_view``.
MAZE_VIEWS = ("full", "egocentric", "local")


#: gymnax's registered environments (gymnax 1.0.1's ``registered_envs``, all 26), trained
#: through one adapter (`GymnaxEnv`; ``pip install purejaxppo[gymnax]``). A newer gymnax's
#: further names are accepted too (its registry is asked). MNISTBandit-bsuite downloads MNIST
#: when it is built.
GYMNAX_ENVS = (
    "CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0", "MountainCarContinuous-v0",
    "Asterix-MinAtar", "Breakout-MinAtar", "Freeway-MinAtar", "Seaquest-MinAtar",
    "SpaceInvaders-MinAtar", "Catch-bsuite", "DeepSea-bsuite", "MemoryChain-bsuite",
    "UmbrellaChain-bsuite", "DiscountingChain-bsuite", "MNISTBandit-bsuite",
    "SimpleBandit-bsuite", "FourRooms-misc", "MetaMaze-misc", "PointRobot-misc",
    "BernoulliBandit-misc", "GaussianBandit-misc", "Reacher-misc", "Swimmer-misc", "Pong-misc",
    "FrozenLake-misc",
)  # fmt: skip
#: Jumanji environments beyond Maze with their own observation encoder, trained in the tests.
#: Other registered Jumanji envs with (multi-)discrete actions run through the flattening
#: fallback encoder.
JUMANJI_ENVS = (
    "Snake-v1", "Game2048-v1", "PacMan-v1", "SlidingTilePuzzle-v0", "Minesweeper-v0", "Tetris-v0",
)  # fmt: skip
#: Brax environments (``pip install purejaxppo[brax]``) are named ``"brax/<name>"``, e.g.
#: ``"brax/inverted_pendulum"``, ``"brax/hopper"``, ``"brax/ant"``.
#: Env suites, named ``"<suite>/<registered name>"``: the prefix, the module of its adapter,
#: and the extra that installs it (``pip install purejaxppo[navix]``). Each module has
#: ``registered_names()``, ``base_name(name)`` (the registered part: XLand envs add
#: ``@<benchmark>``), ``refusal(name)`` (why it cannot be trained, or None) and ``ENV``.
SUITES = {
    "craftax/": ("._craftax", "craftax"),
    "navix/": ("._navix", "navix"),
    "xminigrid/": ("._xminigrid", "xminigrid"),
}
SUPPORTED_ENVS = (
    "Maze-v0", *JUMANJI_ENVS, *GYMNAX_ENVS, "brax/<name>", "craftax/<name>", "navix/<name>",
    "xminigrid/<name>",
)  # fmt: skip
#: What the refusal of an unknown name lists: the families of names, short enough to read in
#: one line (docs/guide.md, "Environments", has them in full).
_SUPPORTED_SHORT = (
    "Maze-v0, gymnax's {gymnax} registered envs, Jumanji's with discrete actions, 'brax/<name>', "
    "'craftax/<name>', 'navix/<name>', 'xminigrid/<name>', or 'package.module:attr'"
)


def check_env(cfg: EnvOptions) -> None:
    """Refuse a config whose env options cannot be built, in one line naming the field.

    Cheap (nothing is built): the config calls it at construction. A Jumanji env's action
    spec is checked when it is built (`make_env`), still before anything compiles.
    """
    _check_options(cfg)
    if isinstance(cfg.env, OwnEnv) or (isinstance(cfg.env, str) and ":" in cfg.env):
        _check_own_options(cfg)
        return
    if cfg.env == "Maze-v0":
        from ._layouts import resolve_maze  # imports jumanji: only when a maze is asked for

        resolve_maze(cfg.maze_spec, cfg.maze_size)  # raises ValueError for bad layouts
        return
    if cfg.maze is not None:
        _fail(
            "maze", cfg.maze, f"maze options apply to Maze-v0 only, not env={cfg.env!r}; drop it."
        )
    if cfg.brax_backend != "positional" and not str(cfg.env).startswith("brax/"):
        _fail("brax_backend", cfg.brax_backend, f"it applies to brax/ envs, not {cfg.env!r}.")
    if cfg.env in GYMNAX_ENVS:
        return
    if str(cfg.env).startswith("brax/"):
        _check_brax(cfg)
        return
    if _suite(cfg.env) is not None:
        _check_suite(cfg)
        return
    import jumanji

    if cfg.env in jumanji.registered_environments() or cfg.env in _gymnax_names():
        return
    _fail("env", cfg.env, _unknown_env(str(cfg.env), sorted(jumanji.registered_environments())))


def _unknown_env(name: str, jumanji_names: list[str]) -> str:
    """Why ``name`` cannot be trained, in a line short enough to read: the closest names,
    each labelled with its library, then the families of names supported."""
    gymnax_names = _gymnax_names()
    supported = _SUPPORTED_SHORT.format(gymnax=len(gymnax_names))
    libraries = {**{n: "Jumanji" for n in jumanji_names}, **{n: "gymnax" for n in gymnax_names}}
    close = difflib.get_close_matches(name, list(libraries), n=2, cutoff=0.5)
    hint = " Did you mean " + " or ".join(f"{c!r} ({libraries[c]})" for c in close) + "?"
    return f"no environment of that name.{hint if close else ''} Names: {supported}."


def _gymnax_names() -> list[str]:
    """gymnax's registered names: `GYMNAX_ENVS`, and a newer gymnax's further ones."""
    try:
        import gymnax
    except ImportError:
        return list(GYMNAX_ENVS)
    return [*GYMNAX_ENVS, *(n for n in gymnax.registered_envs if n not in GYMNAX_ENVS)]


def _is_gymnax(name: str) -> bool:
    """Whether ``name`` is built by gymnax (`check_env` has accepted it)."""
    if name in GYMNAX_ENVS:
        return True
    if name == "Maze-v0" or name.startswith("brax/") or _suite(name) is not None:
        return False
    import jumanji

    return name not in jumanji.registered_environments()


def make_env(cfg: EnvOptions) -> Env:
    """The environment a config names (with ``time_input`` when asked).

    Raises ValueError (one line) for an own environment that cannot be built or traced.
    """
    own = own_env(cfg.env)
    if own is not None:
        env = own.build(cfg.time_limit)
    elif cfg.env == "Maze-v0":
        from ._maze import JumanjiMaze

        env = JumanjiMaze(
            cfg.maze_spec, cfg.maze_size, cfg.time_limit, cfg.maze_pool, cfg.maze_view,
            cfg.maze_refresh, cfg.maze_visited, cfg.maze_window,
        )  # fmt: skip
    elif cfg.env.startswith("brax/"):
        from ._brax import BraxEnv

        env = BraxEnv(cfg.env.removeprefix("brax/"), cfg.brax_backend, cfg.time_limit)
    elif _suite(cfg.env) is not None:
        env = _suite_module(cfg.env).ENV(cfg.env.removeprefix(_suite(cfg.env)), cfg.time_limit)
    elif _is_gymnax(cfg.env):
        env = GymnaxEnv(cfg.env, cfg.time_limit, cfg.memory_length)
    else:  # any other registered Jumanji env (`check_env` has checked the name)
        from ._jumanji import JumanjiEnv

        env = JumanjiEnv(cfg.env, cfg.time_limit)
    return TimeInput(env) if cfg.time_input else env


def episode_stat_count(cfg: EnvOptions) -> int:
    """How many per-episode statistics (`Env.episode_stats`) the config's env reports, for
    the host-memory check before compiling. Only own envs and the suites can report any, so
    only they are built here (Craftax in 1-2 s, well below its compile)."""
    if own_env(cfg.env) is None and _suite(cfg.env) is None:
        return 0
    return len(make_env(cfg).episode_stats)


def describe_env(cfg: EnvOptions) -> str | None:
    """An own environment in one line (`OwnEnv.description`), for the run directory to
    record and resuming to compare; None for a registered name (the name says it all)."""
    own = own_env(cfg.env)
    return None if own is None else own.description(cfg.time_limit)


def with_env(cfg, env, recorded: str | None = None, where: str = ""):
    """``cfg`` on ``env`` (None: unchanged), refused in one line when ``recorded`` (the
    description a run directory holds; None: a named env) describes another environment."""
    if env is None:
        return cfg
    old = str(cfg.env) if recorded is None else recorded
    cfg = cfg.replace(env=env)
    if describe_env(cfg) != recorded:
        raise ValueError(
            f"{where}: it was trained on {old!r}, not on {describe_env(cfg) or str(env)!r}; "
            "give the environment it was trained on."
        )
    return cfg


def can_render(cfg: EnvOptions) -> bool:
    """Whether this config's env can be drawn (a GIF): Jumanji envs with Jumanji's own
    renderer, without ``time_input`` or ``maze_visited`` (rendering steps Jumanji's env,
    which keeps neither); Brax envs through Brax's MuJoCo renderer (needs an OpenGL context:
    EGL); the suites and own `Env` subclasses with ``can_draw`` through their `Env.frame`,
    without ``time_input``. gymnax has no renderer."""
    return why_not_drawn(cfg) is None


def why_not_drawn(cfg: EnvOptions) -> str | None:
    """Why this config's env cannot be drawn (`can_render`), in a few words; None if it can."""
    own = own_env(cfg.env) is not None
    if cfg.time_input and (_suite(cfg.env) is not None or own):
        return "its renderer cannot show time_input"
    if own:
        return None if make_env(cfg).can_draw else "the env draws no frames (Env.can_draw)"
    if _suite(cfg.env) is not None:  # each suite's own renderer (`Env.frame`)
        return None
    if _is_gymnax(cfg.env):
        return "gymnax has no renderer"
    if cfg.time_input or cfg.maze_visited:
        return "Jumanji's renderer keeps neither time_input nor maze_visited"
    return None


def _check_own_options(cfg: EnvOptions) -> None:
    """An own environment (an object or an import path): its form, and no named-env options.
    It is built and traced by `make_env` (the trainer's first step, before compiling)."""
    check_own(cfg.env)
    if cfg.maze is not None:
        _fail("maze", cfg.maze, f"maze options apply to Maze-v0 only, not env={cfg.env!r}.")
    if cfg.brax_backend != "positional":
        _fail("brax_backend", cfg.brax_backend, f"it applies to brax/ envs, not {cfg.env!r}.")


def _suite(name) -> str | None:
    """The suite prefix ``name`` starts with (`SUITES`), or None."""
    if not isinstance(name, str):
        return None
    return next((p for p in SUITES if name.startswith(p)), None)


def _suite_module(name: str):
    import importlib

    return importlib.import_module(SUITES[_suite(name)][0], __package__)


def _check_suite(cfg: EnvOptions) -> None:
    """A suite's env: its extra is installed, the name is registered there, and it can be
    trained (`refusal`); each failure is one line naming the fix."""
    prefix = _suite(cfg.env)
    extra = SUITES[prefix][1]
    module = _suite_module(cfg.env)
    try:
        names = module.registered_names()
    except ImportError:
        _fail("env", cfg.env, f"{prefix}<name> envs need the {extra} extra: "
              f"pip install 'purejaxppo[{extra}]'.")  # fmt: skip
    name = cfg.env.removeprefix(prefix)
    if module.base_name(name) not in names:  # XLand: <name>@<benchmark>
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
        hint = f" Did you mean {[prefix + c for c in close]}?" if close else ""
        _fail("env", cfg.env, f"no such {extra} environment.{hint} {extra} has {len(names)}: "
              f"{', '.join(names)}.")  # fmt: skip
    why = module.refusal(name)
    if why is not None:
        _fail("env", cfg.env, why)


def _check_brax(cfg: EnvOptions) -> None:
    from ._brax import BACKENDS, brax_names

    try:
        names = brax_names()
    except ImportError:
        _fail(
            "env", cfg.env, "Brax environments need the brax extra: pip install 'purejaxppo[brax]'."
        )
    name = cfg.env.removeprefix("brax/")
    if name not in names:
        close = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
        hint = f" Did you mean {['brax/' + c for c in close]}?" if close else ""
        _fail("env", cfg.env, f"no such Brax environment.{hint} Brax has {names}.")
    if cfg.brax_backend not in BACKENDS:
        _fail("brax_backend", cfg.brax_backend, f"use one of {list(BACKENDS)}.")


def _check_options(c: EnvOptions) -> None:
    """Each option's type and range, and that it applies to the chosen env."""
    for name, low in (("maze_pool", 0), ("maze_refresh", 1), ("maze_window", 3)):
        v = getattr(c, name)
        if not isinstance(v, numbers.Integral) or isinstance(v, bool) or v < low:
            fix = {
                "maze_pool": "use a non-negative integer (0 turns the pool off).",
                "maze_refresh": f"use an integer from 1 to maze_pool={c.maze_pool}.",
                "maze_window": "use an odd integer >= 3 (the agent is at its centre).",
            }[name]
            _fail(name, v, fix)
    if c.maze_refresh > max(c.maze_pool, 1):
        _fail("maze_refresh", c.maze_refresh, f"use an integer from 1 to maze_pool={c.maze_pool}.")
    for name in ("time_input", "maze_visited"):
        if not isinstance(getattr(c, name), bool):
            _fail(name, getattr(c, name), "use True or False.")
    if c.maze_view not in MAZE_VIEWS:
        _fail("maze_view", c.maze_view, f"use one of {list(MAZE_VIEWS)}.")
    if c.maze_window % 2 == 0:
        _fail("maze_window", c.maze_window, "use an odd integer >= 3 (the agent is at its centre).")
    if c.maze_window != 5 and c.maze_view != "local":
        _fail("maze_window", c.maze_window, "it applies to maze_view='local' only.")
    if c.memory_length is not None:
        if c.env != "MemoryChain-bsuite":
            _fail("memory_length", c.memory_length, f"it applies to MemoryChain-bsuite only, "
                  f"not env={c.env!r}; drop it.")  # fmt: skip
        if not isinstance(c.memory_length, numbers.Integral) or c.memory_length < 1:
            _fail("memory_length", c.memory_length, "use a positive integer (or None).")
    if c.maze_view != "full" and c.env != "Maze-v0":
        _fail("maze_view", c.maze_view, f"it applies to Maze-v0 only, not env={c.env!r}.")
    if c.maze_visited and c.env != "Maze-v0":
        _fail("maze_visited", c.maze_visited, f"it applies to Maze-v0 only, not env={c.env!r}.")
    if c.time_limit is not None and c.time_limit <= 0:
        _fail("time_limit", c.time_limit, "it must be a positive integer or None.")
