"""The programs an `Engine` compiles, each a small frozen type (a cache key as it is).

``Init``: every agent's first state. ``Train``: init and every update, the whole run.
``Run(n)``: ``n`` more updates from given states (a checkpointed chunk). ``Generations``:
PBT's generations (updates, then ``between`` across the population), in one program.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from ._config import PPOConfig

#: ``between(state, hparams, metrics, carry, valid) -> (state, hparams, carry, record)``: what
#: `Engine.run_generations` does across the agent axis after each generation. It keys the
#: compiled program, so it must be hashable (a frozen dataclass, a module-level function).
Between = Callable[..., tuple[Any, PPOConfig, Any, Any]]


@dataclasses.dataclass(frozen=True)
class Init:
    """Every agent's initial state."""


@dataclasses.dataclass(frozen=True)
class Train:
    """Init and every update of the config: the whole run in one program."""


@dataclasses.dataclass(frozen=True)
class Run:
    """``num_updates`` more updates of every agent from given states."""

    num_updates: int


@dataclasses.dataclass(frozen=True)
class Generations:
    """``count`` generations of ``interval`` updates, each followed by ``between``, then
    ``tail`` more updates with no ``between`` after them."""

    interval: int
    count: int
    between: Between
    tail: int = 0


Program = Init | Train | Run | Generations
INIT, TRAIN = Init(), Train()
