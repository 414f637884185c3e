"""Maze layouts: the reference's easy and medium mazes, user layouts, and their Jumanji generator.

A layout is a tuple of equal-length strings: ``#`` wall, ``.`` free, ``S`` a possible start,
``G`` a possible target. Every episode draws its start and its target uniformly and
independently from the marked cells.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
from jumanji.environments.routing.maze.generator import Generator
from jumanji.environments.routing.maze.types import Position, State

EASY: tuple[str, ...] = ("S.........",) + ("..........",) * 8 + (".........G",)
"""The reference's easy maze: no walls, start (0, 0), target (9, 9)."""

# The reference drew start and target with an exclusive upper bound of 2, so only 4 of these
# 9 combinations ever occurred (defect 3). Here all 3 × 3 are drawn uniformly.
MEDIUM: tuple[str, ...] = (
    "S.#..#.##S",
    "..#..#....",
    ".....##.##",
    "####....#G",
    ".....#..#.",
    "..#.##....",
    "#.#.##.###",
    "G.#....#G.",
    "###..#.##.",
    "S....#....",
)
"""The reference's medium maze: starts {(0,0), (9,0), (0,9)}, targets {(3,9), (7,8), (7,0)}."""

NAMED = {"easy": EASY, "medium": MEDIUM}


@dataclass(frozen=True)
class MazeLayout:
    """A parsed, validated layout."""

    walls: np.ndarray  # bool (rows, cols)
    starts: np.ndarray  # int32 (num_starts, 2) of (row, col)
    targets: np.ndarray  # int32 (num_targets, 2)

    @property
    def shape(self) -> tuple[int, int]:
        return self.walls.shape

    def __post_init__(self):
        rows, cols = self.walls.shape
        for kind, cells in (("start", self.starts), ("target", self.targets)):
            if len(cells) == 0:
                raise ValueError(f"maze layout has no {kind} cell; mark at least one.")
            for r, c in cells:
                if not (0 <= r < rows and 0 <= c < cols):
                    raise ValueError(f"maze layout: {kind} ({r}, {c}) is outside the grid.")
                if self.walls[r, c]:
                    raise ValueError(f"maze layout: {kind} ({r}, {c}) is on a wall.")
        for s in self.starts:
            seen = _reachable(self.walls, tuple(s))
            for t in self.targets:
                if tuple(t) not in seen:
                    raise ValueError(
                        f"maze layout: target {tuple(map(int, t))} is unreachable from start "
                        f"{tuple(map(int, s))}; open a path or remove one of the marks."
                    )
                if tuple(t) == tuple(s):
                    raise ValueError(f"maze layout: start and target coincide at {tuple(s)}.")


def parse_layout(rows) -> MazeLayout:
    """Parse rows of ``#.SG`` characters into a `MazeLayout`, with errors that say where."""
    if isinstance(rows, str):
        rows = tuple(r for r in rows.strip().splitlines())
    rows = tuple(rows)
    if not rows or not all(isinstance(r, str) for r in rows):
        raise ValueError("maze layout must be a non-empty tuple of strings, one per row.")
    width = len(rows[0])
    if width == 0:
        raise ValueError("maze layout: row 0 is empty.")
    for i, r in enumerate(rows):
        if len(r) != width:
            raise ValueError(
                f"maze layout is ragged: row {i} has {len(r)} characters, row 0 has {width}."
            )
        for j, ch in enumerate(r):
            if ch not in "#.SG":
                raise ValueError(
                    f"maze layout: unknown character {ch!r} at row {i}, col {j}; "
                    "use '#' wall, '.' free, 'S' start, 'G' target."
                )
    grid = np.array([list(r) for r in rows])
    return MazeLayout(
        walls=grid == "#",
        starts=np.argwhere(grid == "S").astype(np.int32),
        targets=np.argwhere(grid == "G").astype(np.int32),
    )


def resolve_maze(spec, maze_size=(10, 10)) -> MazeLayout | tuple[int, int]:
    """A `MazeLayout` for a named or given layout, or the (rows, cols) of ``"random"``."""
    if isinstance(spec, str):
        if spec == "random":
            rows, cols = maze_size
            if rows < 2 or cols < 2:
                raise ValueError(f"PPOConfig.maze_size={maze_size!r}: need at least 2×2.")
            return (int(rows), int(cols))
        if spec not in NAMED:
            raise ValueError(
                f"PPOConfig.maze={spec!r} is unknown: use 'easy', 'medium' or 'random', or a "
                "layout of rows of #/./S/G (a tuple of strings; on the command line, a list "
                "under maze: in a --config file)."
            )
        spec = NAMED[spec]
    return parse_layout(spec)


def _reachable(walls: np.ndarray, start: tuple[int, int]) -> set:
    rows, cols = walls.shape
    seen, queue = {start}, collections.deque([start])
    while queue:
        r, c = queue.popleft()
        for dr, dc in ((-1, 0), (0, 1), (1, 0), (0, -1)):
            n = (r + dr, c + dc)
            if 0 <= n[0] < rows and 0 <= n[1] < cols and not walls[n] and n not in seen:
                seen.add(n)
                queue.append(n)
    return seen


class LayoutGenerator(Generator):
    """Jumanji Maze generator for a fixed layout: uniform start and target from the marks.

    Cheap enough to run at every step, which is what auto-reset under `vmap` does.
    """

    def __init__(self, layout: MazeLayout):
        super().__init__(num_rows=layout.shape[0], num_cols=layout.shape[1])
        self.layout = layout

    def __call__(self, key: jax.Array) -> State:
        # Two PRNG calls, not five (split into 3 + two randints): under vmap this runs at every
        # env step, and on CPU each threefry call is a small while loop of its own.
        # `bits % n` is biased by at most n / 2**32 (< 1e-8 for any real layout).
        key, sub = jax.random.split(key)
        bits = jax.random.bits(sub, (2,), jnp.uint32)
        s = _pick(self.layout.starts, (bits[0] % len(self.layout.starts)).astype(jnp.int32))
        t = _pick(self.layout.targets, (bits[1] % len(self.layout.targets)).astype(jnp.int32))
        return State(
            agent_position=Position(row=s[0], col=s[1]),
            target_position=Position(row=t[0], col=t[1]),
            walls=jnp.asarray(self.layout.walls),
            action_mask=None,
            key=key,
            step_count=jnp.array(0, jnp.int32),
        )


def _pick(cells, i) -> jax.Array:
    """``cells[i]`` (a constant table of (row, col)) by comparison, not indexing: under
    `vmap` an index per env is a gather, which a TPU runs slowly (docs/benchmarks.md)."""
    table = jnp.asarray(cells, jnp.int32)
    hit = jnp.arange(len(table)) == i
    return jnp.sum(jnp.where(hit[:, None], table, 0), axis=0)
