"""Sweep axes: the one mapping between an agent's coordinates and its place in the arrays.

A sweep's ``axes`` is an ordered dict ``name -> coordinates``: static fields first (one
program each), then traced hyperparameters (or ``"sample"``), then ``"seed"``. Arrays of
per-agent results have these axes in this order. `SweepResult.agent`, the run directory's
`load_policy`, and the CLI's ``eval`` all locate agents through this module.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from ._config import static_field_names


def index_of(axes: dict[str, list], coords: dict[str, Any]) -> tuple[int, ...]:
    """The index of the agent at ``coords`` (e.g. ``lr=3e-4, seed=5``).

    Axes of length one may be omitted; numbers match to a relative 1e-9 (a coordinate read
    back from JSON or typed by hand is the same value).
    """
    unknown = set(coords) - set(axes)
    if unknown:
        raise ValueError(f"unknown sweep axes {sorted(unknown)}; axes are {list(axes)}.")
    index = []
    for name, coord in axes.items():
        if name not in coords:
            if len(coord) != 1:
                raise ValueError(f"give {name}=one of {list(coord)}.")
            index.append(0)
            continue
        matches = [i for i, c in enumerate(coord) if same(c, coords[name])]
        if not matches:
            raise ValueError(f"{name}={coords[name]!r} is not one of {list(coord)}.")
        index.append(matches[0])
    return tuple(index)


def coords_of(axes: dict[str, list], index: tuple[int, ...]) -> dict[str, Any]:
    """The coordinates of the agent at ``index`` (the inverse of `index_of`)."""
    return {name: coord[i] for (name, coord), i in zip(axes.items(), index, strict=True)}


def flat_index(axes: dict[str, list], flat: int) -> tuple[int, ...]:
    """The index of the ``flat``-th agent in row-major order (the run's table order)."""
    shape = tuple(len(v) for v in axes.values())
    if not 0 <= flat < math.prod(shape):
        raise ValueError(f"agent {flat}: this run has agents 0..{math.prod(shape) - 1}.")
    return tuple(int(i) for i in np.unravel_index(flat, shape))


def split_program(axes: dict[str, list], index: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    """``(program, local index)``: which static setting's program holds the agent at
    ``index`` (row-major over the static axes), and its index inside that program."""
    static = [len(v) for k, v in axes.items() if k in static_field_names()]
    n = len(static)
    program = int(np.ravel_multi_index(index[:n], static)) if n else 0
    return program, tuple(index[n:])


def static_setting(axes: dict[str, list], index: tuple[int, ...]) -> dict[str, Any]:
    """The static fields' values at ``index`` (tuples where JSON gave lists)."""
    return {
        k: tuple(v) if isinstance(v, list) else v
        for k, v in coords_of(axes, index).items()
        if k in static_field_names()
    }


def same(a: Any, b: Any) -> bool:
    """Coordinate equality: numbers to a relative 1e-9, anything else exactly."""
    if isinstance(a, numbers.Real) and isinstance(b, numbers.Real):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    return a == b
