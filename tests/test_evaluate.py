"""Evaluation in one program, one agent as a plain policy, and the run directory's params."""

import jax
import numpy as np
import pytest

from purejaxppo import PPOConfig, evaluate, load_policy, sweep
from purejaxppo._distributions import masked_log_probs
from purejaxppo.evaluation import policy_of
from purejaxppo.rundir import write_run

pytestmark = pytest.mark.timeout(600)

# 16 updates on the open 10x10 maze: enough for some agents to reach the target greedily.
CFG = PPOConfig(
    maze="easy", num_envs=8, num_steps=64, minibatch_size=256, update_epochs=4,
    total_timesteps=8192,
)  # fmt: skip
SHORTEST = 18  # (0, 0) -> (9, 9) with no walls
LIMIT = 100  # Jumanji's default time limit for 10x10: rows * cols


@pytest.fixture(scope="module")
def trained():
    return sweep(CFG, seeds=3, lr=[3e-4, 1e-3])


def test_evaluate_every_agent_in_one_call(trained):
    ev = evaluate(CFG, trained.state.params, jax.random.PRNGKey(7), num_episodes=6)
    assert ev.episode_return.shape == (2, 3, 6) and ev.success.shape == (2, 3, 6)
    ret, length, success = map(np.asarray, (ev.episode_return, ev.episode_length, ev.success))
    # Maze pays 1 at the target and nothing else, so return == success for each episode; a
    # success takes at least the shortest path, a failure runs to the time limit.
    np.testing.assert_array_equal(ret, success.astype(np.float32))
    assert success.any()  # some agents reach the target, so the length check bites
    assert (length[success] >= SHORTEST).all() and (length[~success] == LIMIT).all()
    again = evaluate(CFG, trained.state.params, jax.random.PRNGKey(7), num_episodes=6)
    np.testing.assert_array_equal(again.episode_length, ev.episode_length)  # greedy: same


def test_an_agent_alone_gets_its_row(trained):
    ev = evaluate(CFG, trained.state.params, jax.random.PRNGKey(3), 4, greedy=False)
    alone = jax.tree.map(lambda x: x[1, 2][None], trained.state.params)
    one = evaluate(CFG, alone, jax.random.PRNGKey(3), 4, greedy=False)
    # Exact although the batch shapes differ: returns and lengths are integer counts of
    # discrete steps, which change only if a sampled action sits within an ulp of a tie.
    np.testing.assert_array_equal(one.episode_return[0], ev.episode_return[1, 2])
    np.testing.assert_array_equal(one.episode_length[0], ev.episode_length[1, 2])


def test_extracted_policy_acts_like_the_agent_inside_the_vmapped_result(trained):
    params, obs, mask = trained.state.params, trained.state.obs, trained.state.mask

    # Inside: every agent's network on its own envs' observations, vmapped over agents.
    def inside(net, o, m):
        logits, _ = jax.vmap(net)(o)
        return np.argmax(masked_log_probs(logits, m), -1)

    actions = jax.vmap(jax.vmap(inside))(params, obs, mask)  # (2, 3, num_envs)
    for index in [(0, 0), (1, 2), (0, 1)]:
        policy = policy_of(params, index)
        np.testing.assert_array_equal(policy(obs[index], mask[index]), actions[index])
        # A single observation (no batch axis) works too.
        assert int(policy(obs[index][0], mask[index][0])) == int(actions[index][0])


def test_load_policy_from_a_run_directory(trained, tmp_path):
    write_run(tmp_path, trained, eval_episodes=0, gif=False)
    obs, mask = trained.state.obs[1, 0], trained.state.mask[1, 0]
    loaded = load_policy(tmp_path, lr=1e-3, seed=0)
    np.testing.assert_array_equal(
        loaded(obs, mask), policy_of(trained.state.params, (1, 0))(obs, mask)
    )
    with pytest.raises(ValueError, match="give lr=one of"):
        load_policy(tmp_path, seed=0)
    key = jax.random.PRNGKey(0)
    sampled = loaded(obs, mask, key)
    assert sampled.shape == (CFG.num_envs,) and bool(np.asarray(mask)[np.arange(8), sampled].all())


def test_tensorboard_logs_aggregates_and_per_setting_curves(trained, tmp_path):
    from conftest import read_tensorboard

    from purejaxppo.rundir import write_tensorboard

    write_tensorboard(tmp_path, trained)
    assert len(list(tmp_path.glob("events.out.tfevents.*"))) == 1
    scalars = read_tensorboard(tmp_path)
    ret = np.asarray(trained.metrics.episode_return).reshape(-1, CFG.num_updates)
    steps = {s: i for i, s in enumerate((np.arange(CFG.num_updates) + 1) * CFG.batch_size)}
    for step, value in scalars["episode_return/max"]:
        assert value == pytest.approx(np.nanmax(ret[:, steps[step]]))
    assert len(scalars["entropy/mean"]) == CFG.num_updates
    assert {"setting/lr_0.0003", "setting/lr_0.001"} <= set(scalars)


def test_an_event_is_encoded_as_tensorboards_protobuf_reads_it():
    from tensorboardX.proto.event_pb2 import Event
    from tensorboardX.proto.summary_pb2 import Summary

    from purejaxppo.rundir._events import encode_scalars

    tags = ["a", "loss/é", "x" * 200, "lr=0.001 seed=3/episode_return"]  # 1- and 2-byte lengths
    values = [0.0, -1.5, 3.4e38, 1e-45]  # zero (protobuf leaves it out), a float32 subnormal
    for step in (0, 1, 127, 128, 300, 2**40):
        got = Event.FromString(encode_scalars(1234.5, step, tags, values))
        value = [Summary.Value(tag=t, simple_value=v) for t, v in zip(tags, values, strict=True)]
        assert got == Event(wall_time=1234.5, step=step, summary=Summary(value=value))
    with pytest.raises(ValueError, match="step"):
        encode_scalars(1234.5, -1, tags, values)
