"""The one chunked-run driver (`_chunks`), the one health test, the one range sampler and the
public top level: the pieces every trainer shares, checked on their own (nothing compiles)."""

import json
import types
import warnings

import numpy as np
import pytest

import purejaxppo
from purejaxppo._chunks import RunFiles, check_chunking, open_run, run_chunks
from purejaxppo._ppo import Metrics, healthy
from purejaxppo._search import LOG_UNIFORM_FIELDS, sample_ranges
from purejaxppo.rundir import CheckpointError
from purejaxppo.rundir._format import checkpoints


def count_chunks(sizes):
    def advance(carry, done, size):
        sizes.append(size)
        return carry + [done], size

    return advance


def test_chunks_cover_the_run_in_order_and_finish():
    sizes = []
    out = run_chunks([], done=0, total=10, every=3, advance=count_chunks(sizes))
    assert sizes == [3, 3, 3, 1] and out.carry == [0, 3, 6, 9]
    assert (out.done, out.finished, out.ran) == (10, True, 10)


def test_a_resumed_run_starts_where_it_was_and_counts_only_this_calls_units():
    sizes = []
    out = run_chunks([], done=4, total=10, every=4, advance=count_chunks(sizes))
    assert sizes == [4, 2] and out.carry == [4, 8] and (out.done, out.ran) == (10, 6)


def test_should_stop_and_stop_at_stop_after_a_chunk_never_at_the_end():
    asked = []
    out = run_chunks(
        [], done=0, total=10, every=2, advance=count_chunks([]),
        should_stop=lambda: asked.append(1) or True,
    )  # fmt: skip
    assert (out.done, out.finished) == (2, False) and len(asked) == 1
    out = run_chunks(
        [], done=0, total=10, every=2, advance=count_chunks([]), stop_at=500,
        env_steps=lambda d: d * 100,
    )  # fmt: skip
    assert (out.done, out.finished) == (6, False)  # 600 steps: the first checkpoint past 500
    out = run_chunks(
        [], done=0, total=4, every=2, advance=count_chunks([]), should_stop=lambda: True
    )
    assert out.done == 2
    out = run_chunks([], done=2, total=4, every=2, advance=count_chunks([]), stop_at=1)
    assert out.finished  # the last chunk ends the run whatever the stop says


def test_an_advance_may_run_more_or_fewer_units_than_offered():
    def advance(carry, done, size):  # PBT's last generation joins the chunk before it
        ran = size + 1 if done + size == 4 else size
        return carry + [ran], ran

    out = run_chunks([], done=0, total=5, every=2, advance=advance)
    assert out.carry == [2, 3] and out.finished


def test_every_chunk_is_checkpointed_and_the_newest_reads_back(tmp_path):
    files = RunFiles(tmp_path, {"sweep": {"x": 1}, "run": "r"})
    assert files.newest(lambda: pytest.fail("no template without a checkpoint")) is None

    def advance(carry, done, size):
        return carry + size, size

    out = run_chunks(
        np.zeros(3, np.float32), done=0, total=5, every=2, advance=advance, files=files,
        checkpoint=lambda c: {"x": c},
    )  # fmt: skip
    assert [p.name for p in checkpoints(tmp_path)] == ["ckpt-00000004.eqx", "ckpt-00000005.eqx"]
    back = files.newest(lambda: {"x": np.zeros(3, np.float32)})
    np.testing.assert_array_equal(back["x"], out.carry)
    other = RunFiles(tmp_path, {"sweep": {"x": 2}, "run": "r"})
    with pytest.raises(CheckpointError):
        other.newest(lambda: {"x": np.zeros(3, np.float32)})


def test_open_run_writes_a_description_and_a_resume_must_match_it(tmp_path):
    spec = {"config": {"lr": 1e-3}, "seeds": [0, 1]}
    with open_run(tmp_path / "a", "sweep", spec, resume=False, overwrite=False,
                  settings={"checkpoint_every": 2}) as files:  # fmt: skip
        files.save(1, {"x": np.zeros(1)})
    stored = json.loads((tmp_path / "a" / "sweep.json").read_text())
    assert stored["checkpoint_every"] == 2 and stored["seeds"] == [0, 1] and stored["run"]
    with open_run(tmp_path / "a", "sweep", spec, resume=True, overwrite=False,
                  settings={"checkpoint_every": 5}) as files:  # a setting may change  # fmt: skip
        assert files.identity == {"sweep": spec, "run": stored["run"]}
    with pytest.raises(CheckpointError, match="sweep.json describes a different sweep"):
        with open_run(tmp_path / "a", "sweep", {**spec, "seeds": [0]}, resume=True,
                      overwrite=False, settings={"checkpoint_every": 2}):  # fmt: skip
            pass
    # A field an older release did not write is filled from ``defaults``.
    with open_run(tmp_path / "a", "sweep", {**spec, "group_size": None}, resume=True,
                  overwrite=False, settings={"checkpoint_every": 2},
                  defaults={"group_size": None}):  # fmt: skip
        pass
    # A config field added since is read as its default, and only as its default; the
    # checkpoints keep the stamp they were written with.
    newer = {**spec, "config": {"lr": 1e-3, "sequence_length": None}}
    with open_run(tmp_path / "a", "sweep", newer, resume=True, overwrite=False,
                  settings={"checkpoint_every": 2}) as files:  # fmt: skip
        assert files.identity == {"sweep": spec, "run": stored["run"]}
        back = files.newest(lambda: {"x": np.ones(1)})  # the old checkpoint reads back
        assert np.array_equal(back["x"], np.zeros(1))
    other = {**spec, "config": {"lr": 1e-3, "sequence_length": 8}}  # not the default
    with pytest.raises(CheckpointError, match="describes a different sweep"):
        with open_run(tmp_path / "a", "sweep", other, resume=True, overwrite=False,
                      settings={"checkpoint_every": 2}):  # fmt: skip
            pass


def test_run_directories_keep_their_gru_initialisation_when_its_defaults_change(tmp_path):
    """``gru_init`` and ``head_init_gain`` changed defaults (2026-12-06). A GRU config written
    before holds neither field and meant equinox's cell and sqrt 2; a config of any other
    network may hold the old ``head_init_gain`` and still loads (the fields do nothing
    there). A resume reads them so; a config with today's defaults is refused, naming them."""
    from purejaxppo import PPOConfig
    from purejaxppo.rundir._format import config_from_json, config_to_json

    gru = PPOConfig(env="CartPole-v1", network="gru", conv_channels=(), head_widths=(8,))
    assert (gru.gru_init, gru.head_init_gain) == ("flax", 2.0)
    then = gru.replace(gru_init="equinox", head_init_gain=2**0.5)
    old = {k: v for k, v in config_to_json(then).items() if k not in ("gru_init", "head_init_gain")}
    assert config_from_json(old) == then
    written_by_1bc39c7 = {**config_to_json(PPOConfig()), "head_init_gain": 2**0.5}
    del written_by_1bc39c7["gru_init"]
    assert config_from_json(written_by_1bc39c7) == PPOConfig()

    spec = {"config": old, "seeds": [0]}
    with open_run(tmp_path / "g", "sweep", spec, resume=False, overwrite=False):
        pass
    as_read = {"config": config_to_json(config_from_json(old)), "seeds": [0]}
    with open_run(tmp_path / "g", "sweep", as_read, resume=True, overwrite=False) as files:
        assert files.identity["sweep"] == spec  # stamped as written
    today = {"config": config_to_json(gru), "seeds": [0]}
    with pytest.raises(CheckpointError, match="config.gru_init, config.head_init_gain"):
        with open_run(tmp_path / "g", "sweep", today, resume=True, overwrite=False):
            pass


def test_chunking_arguments_are_refused_in_one_line_naming_the_caller():
    def refused(*args, auto=True, **kwargs):
        with pytest.raises(ValueError) as e:
            check_chunking("sweep", *args, unit="updates", auto=auto, **kwargs)
        return str(e.value)

    assert "need run_dir" in refused(None, 3, False, False, None)
    assert "checkpoint_every=0" in refused("d", 0, False, False, None)
    assert "or 'auto'" not in refused("d", "auto", False, False, None, auto=False)
    assert "give one of them" in refused("d", 2, True, True, None)
    assert "stop_at=True" in refused("d", 2, False, False, True)
    assert check_chunking("sweep", "d", "auto", False, False, 10, unit="updates", auto=True)
    assert not check_chunking("sweep", None, None, False, False, None, unit="u", auto=True)


def test_healthy_flags_each_unhealthy_update():
    n = 6
    m = Metrics(*[np.zeros(n, np.float32) for f in Metrics._fields if f != "episode_stats"])
    m = m._replace(skipped_steps=np.array([0, 1, 0, 0, 0, 0]),
                   policy_loss=np.array([0, 0, np.nan, 0, 0, 0], np.float32),
                   entropy=np.array([0, 0, 0, np.inf, 0, 0], np.float32),
                   grad_norm=np.array([0, 0, 0, 0, 1e7, 1], np.float32),
                   episode_return=np.full(n, np.nan, np.float32))  # fmt: skip
    assert np.asarray(healthy(m)).tolist() == [True, False, False, False, True, True]
    assert np.asarray(healthy(m, 1e6)).tolist() == [True, False, False, False, False, True]


def test_ranges_are_drawn_in_order_log_uniformly_where_they_span_decades():
    ranges = {"lr": (1e-5, 1e-2), "ent_coef": (0.0, 0.1)}
    draws = sample_ranges(ranges, 1000, np.random.default_rng(7))
    rng = np.random.default_rng(7)  # the same draws, written out
    lr = np.exp(rng.uniform(np.log(1e-5), np.log(1e-2), 1000))
    np.testing.assert_array_equal(draws["lr"], lr)
    np.testing.assert_array_equal(draws["ent_coef"], rng.uniform(0.0, 0.1, 1000))
    assert "lr" in LOG_UNIFORM_FIELDS and 0.2 < np.mean(draws["lr"] < 1e-4) < 0.47  # a decade in 3


def test_the_top_level_is_small_and_moved_names_still_import_with_a_warning():
    assert len(purejaxppo.__all__) <= 20
    public = {n for n in dir(purejaxppo) if not n.startswith("_")}
    modules = {n for n in public if isinstance(getattr(purejaxppo, n), types.ModuleType)}
    assert public - modules <= set(purejaxppo.__all__)  # (``cli`` is there once imported)
    for name, home in [("read_run", "rundir"), ("agent_mesh", "engine"),
                       ("policy_of", "evaluation"), ("CheckpointError", "rundir")]:  # fmt: skip
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = getattr(purejaxppo, name)
        assert value is getattr(getattr(purejaxppo, home), name)
        assert any(f"purejaxppo.{home}.{name}" in str(w.message) for w in caught)
    with pytest.raises(AttributeError):
        purejaxppo.no_such_name  # noqa: B018
