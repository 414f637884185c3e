"""Compiled programs past `MAX_PROGRAMS` are freed, so a long-lived process (a notebook, a
test session, a research loop over configs) does not run out of memory mappings.

An XLA:CPU executable holds hundreds of memory mappings until it is freed, and Linux allows
65,530 per process: a process that kept every program it compiled crashed inside XLA after
about a hundred.
"""

import gc
import os
from collections import OrderedDict

import pytest
from conftest import SMALL, tree_equal

from purejaxppo._agents import agent_inputs
from purejaxppo._engine import Engine, _kept
from purejaxppo._programs import Run

MAPS = "/proc/self/maps"


def mappings() -> int:
    with open(MAPS) as f:
        return sum(1 for _ in f)


@pytest.fixture
def limit_of_one(monkeypatch):
    """`MAX_PROGRAMS` of 1, over a registry of this test's own: the session's shared
    programs are neither counted nor freed."""
    monkeypatch.setattr(_kept, "MAX_PROGRAMS", 1)
    monkeypatch.setattr(_kept, "_RECENT", OrderedDict())


@pytest.mark.slow  # a long-process guarantee (and ~17 s): the slow tier is the long process
@pytest.mark.skipif(not os.path.exists(MAPS), reason="needs Linux's /proc/self/maps")
def test_programs_past_the_limit_are_freed_and_compile_again_alike(limit_of_one):
    engine = Engine(SMALL, mesh=False)
    keys, hp, _ = agent_inputs(SMALL, {}, [0])
    state = engine.init(keys, hp)
    first = engine.run(state, hp, 1)  # frees the init program
    gc.collect()
    at_limit = mappings()
    for k in (2, 3):
        engine.run(state, hp, k)  # each a new program; each frees the one before
    gc.collect()
    grown = mappings() - at_limit
    assert [kind for kind, *_ in engine._compiled] == [Run(3)]
    # Two more programs at ~600 mappings each (measured) would add ~1,200 if kept.
    assert grown < 300, f"{grown} new memory mappings after 2 programs past the limit"
    assert tree_equal(engine.run(state, hp, 1), first)  # compiled again, same result


@pytest.mark.subprocess
@pytest.mark.timeout(300)
@pytest.mark.skipif(not os.path.exists(MAPS), reason="counts /proc/self/maps (Linux)")
def test_the_mapping_reproducer_grows_when_programs_are_held_and_levels_off_with_ours():
    """tests/map_count.py, small: held programs add ~3 mappings per kernel each (the growth
    that ends in XLA's abort at vm.max_map_count), the engine's rule levels off."""
    import re
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).parent / "map_count.py"
    added = {}
    for hold in ("jax", "ours"):
        out = subprocess.run(
            [sys.executable, str(script), "--hold", hold, "--programs", "8", "--sorts", "50",
             "--keep", "2", "--every", "4"],
            capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]
        counts = [int(n) for n in re.findall(r"programs: (\d+) mappings", out.stdout)]
        assert len(counts) == 2 and "finished: 8 programs" in out.stdout
        added[hold] = counts[1] - counts[0]  # mappings added by programs 5 to 8
    assert added["jax"] >= 4 * 100  # 50 sorts × ~3 mappings, for each of 4 held programs
    assert added["ours"] < 100  # each new program frees an old one
