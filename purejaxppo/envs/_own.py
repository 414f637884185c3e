"""Your own environment: an object, or an import path, where a config names an env.

`PPOConfig.env` (and the ``env=`` argument of `make_train`, `sweep`, `pbt`, `evaluate` and
`load_policy`) takes, besides a registered name:

* an `Env`: this package's interface (action masks; truncation with the final observation);
* a **gymnax-style** environment: ``reset(key, params)``, ``step(key, state, action,
  params)``, ``action_space(params)``, ``observation_space(params)`` and ``default_params``
  (a subclass of gymnax's ``Environment``, or anything with those methods), or a pair
  ``(env, params)`` to train on other params than its defaults;
* ``"package.module:attr"``: an import path naming such an object, or a function of no
  arguments returning one (or ``(env, params)``). This is the form the CLI and config files
  use, and the one a run directory can rebuild in another process.

An object is part of the compiled program: configs holding the same object share programs,
another object compiles anew (`OwnEnv` compares by identity). A run directory records its
label (the import path, or ``object:<module>:<class>``) and a description; resuming or
loading a run trained on an object needs the same environment again (``env=``).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._errors import one_line as _one_line
from ._base import METRIC_NAMES, Env

#: The methods a gymnax-style environment has (`gymnax.environments.Environment`'s API).
GYMNAX_METHODS = ("reset", "step", "action_space", "observation_space", "default_params")
_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
#: The label of an env given as an object: what a run directory records in its config.
OBJECT_PREFIX = "object:"


class OwnEnv:
    """An environment given as an object (with its params), as `PPOConfig.env` holds it.

    Equal (and hashed) by the identity of the object and its params: the same object
    reuses compiled programs. ``path`` is the import path it was built from, if any.
    """

    __slots__ = ("obj", "params", "path", "_built")

    def __init__(self, obj: Any, params: Any = None, path: str | None = None):
        self.obj, self.params, self.path = obj, params, path
        self._built: dict = {}  # time_limit -> checked Env

    @property
    def label(self) -> str:
        """The import path, or ``object:<module>:<class>``: what config.json records."""
        cls = type(self.obj)
        return self.path or f"{OBJECT_PREFIX}{cls.__module__}:{cls.__qualname__}"

    def description(self, time_limit: int | None = None) -> str:
        """The env in one line, the same in every process (no addresses): resuming and
        loading a run compare it with the one the run directory recorded."""
        env = self.build(time_limit)
        kind = "Env" if isinstance(self.obj, Env) else "gymnax-style"
        parts = [f"{self.label} ({kind})"]
        for what in (self.obj, getattr(env, "params", None)):
            if what is not None and type(what).__repr__ is not object.__repr__:
                parts.append(_short(repr(what)))
        actions = (
            f"{env.num_actions} discrete actions"
            if env.action_bounds is None
            else f"{env.num_actions} continuous actions"
        )
        obs = f"observation {env.obs_shape} {np.dtype(env.obs_dtype).name}"
        parts.append(f"{obs}, {actions}, at most {env.max_episode_steps} steps")
        return "; ".join(parts)

    def build(self, time_limit: int | None = None) -> Env:
        """The checked `Env` the trainer steps (cached: the check traces reset and step)."""
        if time_limit not in self._built:
            if isinstance(self.obj, Env):
                if time_limit is not None:
                    raise ValueError(
                        f"PPOConfig.time_limit={time_limit!r} is invalid: env={self.label!r} is "
                        "an Env, which keeps its own time limit; drop time_limit."
                    )
                env = self.obj
            else:
                from ._gymnax import GymnaxEnv

                env = GymnaxEnv.of(self.obj, self.params, self.label, time_limit)
            check_traces(env, self.label)
            self._built[time_limit] = env
        return self._built[time_limit]

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, OwnEnv)
            and other.obj is self.obj
            and other.params is self.params
            and other.path == self.path
        )

    def __hash__(self) -> int:
        return hash((id(self.obj), id(self.params), self.path))

    def __repr__(self) -> str:
        return repr(self.label)

    def __str__(self) -> str:
        return self.label


def as_env(value: Any) -> str | OwnEnv:
    """`PPOConfig.env`'s converter: names and import paths stay strings; an object or an
    ``(env, params)`` pair becomes an `OwnEnv` (checked by `check_own`)."""
    if isinstance(value, (str, OwnEnv)):
        return value
    if isinstance(value, tuple) and len(value) == 2 and not isinstance(value[0], str):
        return OwnEnv(*value)
    return OwnEnv(value)


def is_path(name: Any) -> bool:
    """Whether a config's env string is an import path ``package.module:attr``."""
    return isinstance(name, str) and not name.startswith(OBJECT_PREFIX) and ":" in name


def own_env(env: str | OwnEnv) -> OwnEnv | None:
    """The `OwnEnv` a config's env stands for: itself, an import path resolved (imported
    once per process), or None for a registered name."""
    if isinstance(env, OwnEnv):
        return env
    if isinstance(env, str) and env.startswith(OBJECT_PREFIX):
        raise ValueError(
            f"PPOConfig.env={env!r}: this run trained on an environment object given from "
            "Python, which cannot be rebuilt from its name; pass the same environment again "
            "as env=... (or name a factory as 'package.module:attr')."
        )
    return resolve(env) if is_path(env) else None


def check_own(env: str | OwnEnv) -> None:
    """Refuse, without building anything, an own env that cannot be one (one line)."""
    if isinstance(env, OwnEnv):
        _check_object(env.obj, repr(env.label))
    elif is_path(env) and not _PATH.fullmatch(env):
        raise ValueError(
            f"PPOConfig.env={env!r} is invalid: an import path is 'package.module:attr' "
            "(a module importable from here, and an environment or a function returning one)."
        )


_RESOLVED: dict[str, OwnEnv] = {}


def resolve(path: str) -> OwnEnv:
    """Import ``package.module:attr`` and build the environment it names (once per process)."""
    if path in _RESOLVED:
        return _RESOLVED[path]
    check_own(path)
    module_name, attr = path.split(":")
    where = f"PPOConfig.env={path!r}"
    try:
        if os.getcwd() not in sys.path and "" not in sys.path:
            sys.path.append(os.getcwd())  # the console script's path lacks the working dir
        module = importlib.import_module(module_name)
    except Exception as e:
        raise ValueError(f"{where}: cannot import {module_name} ({_one_line(e)}).") from e
    target = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ValueError(f"{where}: {module_name} has no attribute {attr!r}.")
        target = getattr(target, part)
    if not _is_env_like(target) and callable(target):
        try:
            target = target()
        except Exception as e:
            raise ValueError(f"{where}: calling {attr}() raised {_one_line(e)}.") from e
    if isinstance(target, tuple) and len(target) == 2:
        obj, params = target
    else:
        obj, params = target, None
    _check_object(obj, repr(path))
    _RESOLVED[path] = OwnEnv(obj, params, path)
    return _RESOLVED[path]


def _is_env_like(obj: Any) -> bool:
    return isinstance(obj, Env) or all(hasattr(obj, m) for m in GYMNAX_METHODS)


def _check_object(obj: Any, where: str) -> None:
    if isinstance(obj, type):
        raise ValueError(
            f"PPOConfig.env={where} is the class {obj.__qualname__}, not an environment; "
            "give an instance (e.g. env=MyEnv())."
        )
    if not _is_env_like(obj):
        missing = [m for m in GYMNAX_METHODS if not hasattr(obj, m)]
        raise ValueError(
            f"PPOConfig.env={where} is of type {type(obj).__name__}, not an environment: a "
            f"gymnax-style env needs {', '.join(GYMNAX_METHODS)} (missing: "
            f"{', '.join(missing)}), or subclass purejaxppo.envs.Env."
        )


def check_traces(env: Env, label: str) -> None:
    """Trace ``env``'s reset and step abstractly (nothing runs) and refuse, in one line,
    one that does not trace or whose observations disagree with its declared shape."""
    for name in ("num_actions", "obs_shape", "obs_dtype", "max_episode_steps"):
        if not hasattr(env, name):
            raise ValueError(f"PPOConfig.env={label!r}: the Env has no {name} attribute.")
    key = jax.random.PRNGKey(0)
    try:
        state, obs, mask = jax.eval_shape(env.reset, key)
    except Exception as e:
        raise ValueError(
            f"PPOConfig.env={label!r}: its reset does not trace under jit ({_one_line(e)})."
        ) from e
    if env.action_bounds is not None:
        action = jnp.zeros((env.num_actions,), jnp.float32)
    elif len(env.action_dims) > 1:
        action = jnp.zeros((len(env.action_dims),), jnp.int32)
    else:
        action = jnp.zeros((), jnp.int32)
    try:
        _, out = jax.eval_shape(env.step, state, action)
    except Exception as e:
        raise ValueError(
            f"PPOConfig.env={label!r}: its step does not trace under jit ({_one_line(e)})."
        ) from e
    want = (tuple(env.obs_shape), np.dtype(env.obs_dtype))
    seen = {"reset": obs, "step": out.obs}
    if env.can_truncate:
        if out.final_obs is None:
            raise ValueError(
                f"PPOConfig.env={label!r}: can_truncate is True but its step gives no "
                "final_obs (the observation a truncated episode bootstraps from)."
            )
        seen["step's final_obs"] = out.final_obs
    for where, x in seen.items():
        if (tuple(x.shape), np.dtype(x.dtype)) != want:
            raise ValueError(
                f"PPOConfig.env={label!r}: its {where} observation is {tuple(x.shape)} "
                f"{np.dtype(x.dtype).name}, but the env declares {want[0]} {want[1].name} "
                "(observations must keep one shape and dtype)."
            )
    if tuple(out.mask.shape) != tuple(mask.shape):
        raise ValueError(
            f"PPOConfig.env={label!r}: its action mask is {tuple(mask.shape)} at reset but "
            f"{tuple(out.mask.shape)} after a step."
        )
    for field in ("reward", "terminated", "done"):
        if getattr(out, field).shape != ():
            raise ValueError(
                f"PPOConfig.env={label!r}: its step's {field} has shape "
                f"{getattr(out, field).shape}; one env steps at a time (a scalar)."
            )
    _check_stats(env, out, label)


def _check_stats(env: Env, out, label: str) -> None:
    """Refuse episode statistics whose names and values disagree, or whose names would
    shadow a metric of the trainer's in the run directory's columns (`METRIC_NAMES`)."""
    names = tuple(env.episode_stats)
    taken = sorted(set(names) & set(METRIC_NAMES)) or sorted(
        {n for n in names if names.count(n) > 1}
    )
    if taken or not all(isinstance(n, str) and n for n in names):
        raise ValueError(
            f"PPOConfig.env={label!r}: episode_stats must be distinct non-empty names, none "
            f"a Metrics field (got {taken or list(names)})."
        )
    shape = None if out.stats is None else tuple(out.stats.shape)
    if names and shape != (len(names),):
        raise ValueError(
            f"PPOConfig.env={label!r}: it names {len(names)} episode_stats, so its step's "
            f"stats must have shape ({len(names)},), not {shape}."
        )
    if not names and shape is not None:
        raise ValueError(
            f"PPOConfig.env={label!r}: its step gives stats of shape {shape} but the env "
            "names no episode_stats; name them (one per number)."
        )


def _short(text: str, limit: int = 240) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
