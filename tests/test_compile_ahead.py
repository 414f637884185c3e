"""`Engine.compile_ahead`: a chunk's program compiled in a background thread is the program
the run would have compiled itself, the run waits for it instead of compiling again, and a
failure there is raised where the run waits.

It is on by default only on accelerators; here it is switched on for the CPU
(`AHEAD_ON_CPU`), which runs the same code."""

import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import jax
import numpy as np
import pytest
from conftest import SMALL, tree_equal

from purejaxppo import resume_sweep, sweep
from purejaxppo._agents import agent_inputs, batched
from purejaxppo._chunks import planned_chunks, run_chunks
from purejaxppo._engine import Engine, _core, _shared
from purejaxppo._programs import INIT, Run


@pytest.fixture
def ahead_on_cpu(monkeypatch):
    monkeypatch.setattr(_core, "AHEAD_ON_CPU", True)
    monkeypatch.setattr(_shared, "_ENGINES", {})  # this test's own engines and programs


def fresh_engines(monkeypatch):
    """Runs after this compile their programs again (`engine_for` shares engines)."""
    monkeypatch.setattr(_shared, "_ENGINES", {})


@pytest.fixture
def compiles(monkeypatch):
    """Each program `Engine._fitted` compiles, with the thread it compiled in."""
    seen = []
    fitted = Engine._fitted

    def counted(self, kind, num_agents, args, have=None):
        seen.append((kind, threading.current_thread().name, have))
        return fitted(self, kind, num_agents, args, have)

    monkeypatch.setattr(Engine, "_fitted", counted)
    return seen


@pytest.mark.parametrize(
    ("done", "total", "every"), [(0, 10, 3), (4, 10, 4), (0, 8, 4), (0, 5, 8), (7, 10, 2)]
)
@pytest.mark.parametrize("stop", [None, 1, 3, 4, 7, 9, 10, 12])
def test_planned_chunks_are_the_sizes_run_chunks_runs(done, total, every, stop):
    sizes = []

    def advance(carry, done, size):
        sizes.append(size)
        return carry, size

    run_chunks(
        None, done=done, total=total, every=every, advance=advance, stop_at=stop,
        env_steps=lambda d: d,
    )  # fmt: skip
    assert planned_chunks(done, total, every, stop) == list(dict.fromkeys(sizes))
    assert planned_chunks(total, total, every, stop) == []


@pytest.mark.slow  # ~16 s: two chunked runs, each compiling its three programs
def test_a_chunked_run_compiled_ahead_is_the_run_compiled_in_turn(
    tmp_path, ahead_on_cpu, compiles, monkeypatch
):
    """5 updates in chunks of 2: the chunk program and the tail's (1) compile in the
    background, once each; the results are the same bits as without."""
    cfg = SMALL.replace(total_timesteps=5 * SMALL.batch_size)
    kw = dict(seeds=2, checkpoint_every=2, mesh=False, overwrite=True)
    ahead = sweep(cfg, run_dir=tmp_path / "ahead", **kw)
    background = [(k, have) for k, thread, have in compiles if thread == "purejaxppo-compile"]
    assert sorted(k.num_updates for k, _ in background) == [1, 2]
    assert len(compiles) == 3  # and init, in the caller's thread
    # Each planned with the memory free when it was asked for, not while a chunk ran.
    assert all(have is not None and have > 0 for _, have in background)

    monkeypatch.setattr(_core, "AHEAD_ON_CPU", False)
    fresh_engines(monkeypatch)
    compiles.clear()
    in_turn = sweep(cfg, run_dir=tmp_path / "in_turn", **kw)
    assert len(compiles) == 3  # compiled again, each in the caller's thread
    assert all(thread != "purejaxppo-compile" for _, thread, _ in compiles)
    assert tree_equal(ahead.metrics, in_turn.metrics)
    assert tree_equal(ahead.state, in_turn.state)
    assert ahead.timings["compile_s"] > 0


def test_a_failed_compile_ahead_is_raised_where_the_run_waits(ahead_on_cpu, monkeypatch):
    engine = Engine(SMALL, mesh=False)
    keys, hp, _ = agent_inputs(SMALL, {}, [0])

    def refuse(self, kind, num_agents, args, have=None):
        raise ValueError(f"no program for {kind}")

    monkeypatch.setattr(Engine, "_fitted", refuse)
    assert engine.compile_ahead(1, keys, hp)
    for pending in engine._ahead.values():
        pending.exception()  # the background thread has failed
    monkeypatch.undo()  # init compiles as usual; the chunk's failure waits in its future
    monkeypatch.setattr(_core, "AHEAD_ON_CPU", True)
    state = engine.init(keys, hp)
    with pytest.raises(ValueError, match="no program for Run"):
        engine.run(state, hp, 1)
    state, metrics = engine.run(state, hp, 1)  # asked again: compiled in turn
    assert np.isfinite(np.asarray(metrics.policy_loss)).all()


def test_compile_ahead_stays_off_on_a_cpu_and_refuses_a_bad_count_in_one_line():
    engine = Engine(SMALL, mesh=False)
    keys, hp, _ = agent_inputs(SMALL, {}, [0])
    assert not engine.compile_ahead(1, keys, hp)
    assert not engine._ahead
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match=r"compile_ahead\(num_updates=.*positive int"):
            engine.compile_ahead(bad, keys, hp)


@pytest.mark.slow  # ~14 s: three runs (whole, stopped, resumed)
def test_a_resumed_run_compiles_what_is_left_ahead_and_ends_as_uninterrupted(
    tmp_path, ahead_on_cpu, compiles, monkeypatch
):
    """Stopped after 2 of 5 updates (chunks of 2), resumed: the chunk and the tail compile
    ahead from the checkpoint's update, and the result is the uninterrupted run's."""
    cfg = SMALL.replace(total_timesteps=5 * SMALL.batch_size)
    kw = dict(seeds=2, checkpoint_every=2, mesh=False)
    whole = sweep(cfg, run_dir=tmp_path / "whole", **kw)
    stopped = sweep(cfg, run_dir=tmp_path / "cut", stop_at=1, **kw)
    assert not stopped.finished
    fresh_engines(monkeypatch)
    compiles.clear()
    resumed = resume_sweep(tmp_path / "cut", mesh=False)
    assert sorted((k.num_updates, t) for k, t, _ in compiles) == [
        (1, "purejaxppo-compile"),
        (2, "purejaxppo-compile"),
    ]  # no init: the state is the checkpoint's
    assert tree_equal(resumed.metrics, whole.metrics)
    assert tree_equal(resumed.state, whole.state)


@pytest.mark.subprocess
@pytest.mark.timeout(300)
def test_a_process_that_ends_while_a_compile_is_ahead_exits_cleanly():
    """It waits for the compile: a daemon thread coming back from XLA into a finalising
    interpreter aborted the process ("FATAL: exception not rethrown", signal 6)."""
    script = textwrap.dedent(
        """
        import time
        from conftest import SMALL
        from purejaxppo._agents import agent_inputs, batched
        from purejaxppo._engine import Engine, _core
        _core.AHEAD_ON_CPU = True
        engine = Engine(SMALL, mesh=False)
        keys, hp, _ = agent_inputs(SMALL, {}, [0])
        assert engine.compile_ahead(3, keys, hp)
        while not engine.num_traces:  # its trace has started ...
            time.sleep(0.01)
        with _core._LOWERING:  # ... and its lowering ended: XLA compiles it now
            pass
        print("in flight" if not engine._ahead[next(iter(engine._ahead))].done() else "done")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=280,
        cwd=Path(__file__).parent,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert "in flight" in out.stdout  # the process ended while XLA compiled


def test_the_program_ahead_is_lowered_from_init_shapes_to_the_same_text():
    """What makes the runs' equality exact on any CPU: `compile_ahead` lowers from the
    shapes init gives (`jax.eval_shape`), and that is the program lowered from init's
    arrays, text for text."""
    engine = Engine(SMALL, mesh=False)
    keys, hp, _ = agent_inputs(SMALL, {}, [0, 1])
    placed_keys, placed_hp = engine._place((keys, batched(hp, 2)), 2)
    shapes = jax.eval_shape(engine.program(INIT, 2), placed_keys, placed_hp)
    state = engine.init(keys, hp)
    width = engine.group_width(2)
    from_arrays = engine._lower(Run(2), 2, width, (state, placed_hp)).as_text()
    from_shapes = engine._lower(Run(2), 2, width, (shapes, placed_hp)).as_text()
    assert from_arrays == from_shapes
