"""Your own environment: a gymnax-style object, an `Env`, and an import path.

`Corridor` below is written here, against gymnax's interface but without importing gymnax:
a corridor of `LENGTH` cells, the agent starting at the left end, moving left or right,
paying 1 per step until it reaches the right end. The best return is known: −(LENGTH − 1).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import purejaxppo as ppo
from purejaxppo.envs import Env, EnvStep, make_env

LENGTH = 6
OPTIMUM = -(LENGTH - 1)  # one step right per cell, each paying -1


class Discrete(NamedTuple):  # gymnax's spaces, as far as the trainer reads them
    n: int


class Box(NamedTuple):
    low: float
    high: float
    shape: tuple
    dtype: object = jnp.float32


class CorridorParams(NamedTuple):
    length: int = LENGTH
    max_steps_in_episode: int = 20


class CorridorState(NamedTuple):
    pos: jax.Array
    time: jax.Array


class Corridor:
    """A gymnax-style env (gymnax 1.0's auto-resetting ``step`` with six outputs)."""

    @property
    def default_params(self) -> CorridorParams:
        return CorridorParams()

    def action_space(self, params):
        return Discrete(2)

    def observation_space(self, params):
        return Box(0.0, 1.0, (params.length,))

    def _obs(self, state, params):
        return jax.nn.one_hot(state.pos, params.length)

    def reset(self, key, params):
        state = CorridorState(jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))
        return self._obs(state, params), state

    def step(self, key, state, action, params):
        pos = jnp.clip(state.pos + 2 * action - 1, 0, params.length - 1)
        moved = CorridorState(pos, state.time + 1)
        terminated = pos == params.length - 1
        truncated = jnp.logical_and(~terminated, moved.time >= params.max_steps_in_episode)
        final = self._obs(moved, params)
        done = terminated | truncated
        reset_obs, reset_state = self.reset(key, params)
        state = jax.tree.map(lambda r, s: jnp.where(done, r, s), reset_state, moved)
        info = {"final_observation": final}
        return jnp.where(done, reset_obs, final), state, -1.0, terminated, truncated, info


def make() -> Corridor:
    """The factory the CLI names: ``--env test_own_env:make``."""
    return Corridor()


class MaskedCorridor(Env):
    """The same corridor as this package's `Env`, with an action mask: at the left end,
    "left" is not allowed."""

    num_actions = 2
    obs_shape = (LENGTH,)
    obs_dtype = jnp.float32
    max_episode_steps = 20
    can_truncate = True

    def reset(self, key):
        state = CorridorState(jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))
        return state, jax.nn.one_hot(state.pos, LENGTH), self._mask(state.pos)

    def _mask(self, pos):
        return jnp.array([True, True]).at[0].set(pos > 0)

    def step(self, state, action):
        pos = jnp.clip(state.pos + 2 * action - 1, 0, LENGTH - 1)
        t = state.time + 1
        terminated = pos == LENGTH - 1
        done = terminated | (t >= self.max_episode_steps)
        final = jax.nn.one_hot(pos, LENGTH)
        pos, t = jnp.where(done, 0, pos), jnp.where(done, 0, t)
        obs = jax.nn.one_hot(pos, LENGTH)
        return CorridorState(pos, t), EnvStep(
            obs, self._mask(pos), jnp.float32(-1.0), terminated, done, final
        )


SMALL = ppo.PPOConfig(
    num_envs=8, num_steps=16, total_timesteps=8 * 16 * 2, minibatch_size=64, update_epochs=2,
    mlp_widths=(16,),
)  # fmt: skip


def gymnax_corridor():
    """The same corridor as a subclass of gymnax's own ``Environment`` (its ``step_env`` and
    ``reset_env``), which the adapter steps as it does gymnax's named envs."""
    gymnax = pytest.importorskip("gymnax")
    from gymnax.environments import environment, spaces

    class Sub(environment.Environment):
        @property
        def default_params(self):
            return environment.EnvParams(max_steps_in_episode=20)

        def action_space(self, params):
            return spaces.Discrete(2)

        def observation_space(self, params):
            return spaces.Box(0.0, 1.0, (LENGTH,), jnp.float32)

        def reset_env(self, key, params):
            state = environment.EnvState(time=jnp.zeros((), jnp.int32))
            return jnp.zeros(LENGTH).at[0].set(1.0), _Pos(state.time, jnp.zeros((), jnp.int32))

        def step_env(self, key, state, action, params):
            pos = jnp.clip(state.pos + 2 * action - 1, 0, LENGTH - 1)
            state = _Pos(state.time + 1, pos)
            done = pos == LENGTH - 1
            return jax.nn.one_hot(pos, LENGTH), state, -1.0, done, {}

    del gymnax
    return Sub()


class _Pos(NamedTuple):
    time: jax.Array
    pos: jax.Array


# ---- fast: refusals (each one line, before anything compiles) and program identity -------


class _NoStep:
    default_params = CorridorParams()

    def reset(self, key, params): ...

    def action_space(self, params): ...

    def observation_space(self, params): ...


class _Untraceable(Corridor):
    def step(self, key, state, action, params):
        if state.pos > 0:  # Python control flow on a traced value
            pass
        return super().step(key, state, action, params)


class _ShapeChanges(Corridor):
    def step(self, key, state, action, params):
        obs, *rest = super().step(key, state, action, params)
        return (jnp.concatenate([obs, obs]), *rest)


class _DtypeChanges(Corridor):
    def step(self, key, state, action, params):
        obs, *rest = super().step(key, state, action, params)
        return (obs.astype(jnp.int32), *rest)


class MultiDiscrete(NamedTuple):
    nvec: tuple


class _OddSpace(Corridor):
    def action_space(self, params):
        return MultiDiscrete((2, 3))


class _NoLimitParams(NamedTuple):
    length: int = LENGTH


class _NoLimit(Corridor):
    @property
    def default_params(self):
        return _NoLimitParams()


def _raises_bad() -> None:
    raise RuntimeError("no display")


@pytest.mark.parametrize(
    "env, time_limit, message",
    [
        (_NoStep(), None, "is of type _NoStep, not an environment.*missing: step"),
        (Corridor, None, "is the class Corridor, not an environment; give an instance"),
        (_Untraceable(), None, "its step does not trace \\(TracerBoolConversionError"),
        (_ShapeChanges(), None, "observation is \\(6,\\) float32 at reset but \\(12,\\) float32"),
        (_DtypeChanges(), None, "observation is \\(6,\\) float32 at reset but \\(6,\\) int32"),
        (_OddSpace(), None, "its action space is MultiDiscrete; the trainer takes Discrete or"),
        (_NoLimit(), None, "its params have no max_steps_in_episode"),
        (MaskedCorridor(), 10, "PPOConfig.time_limit=10 is invalid: .* is an Env"),
        ("test_own_env:", None, "an import path is 'package.module:attr'"),
        ("test_own_env", None, "'xminigrid/<name>', or 'package.module:attr'"),
        ("no_such_module_here:make", None, "cannot import no_such_module_here"),
        ("test_own_env:nothing", None, "test_own_env has no attribute 'nothing'"),
        ("test_own_env:_raises_bad", None, "calling _raises_bad\\(\\) raised RuntimeError: no"),
        ("test_own_env:LENGTH", None, "is of type int, not an environment"),
    ],
)
def test_a_bad_environment_is_refused_in_one_line_before_compiling(env, time_limit, message):
    before = ppo.engine.Engine.total_compile_seconds
    with pytest.raises(ValueError, match=message) as e:
        ppo.make_train(SMALL.replace(time_limit=time_limit), env=env)
    assert "\n" not in str(e.value)
    assert ppo.engine.Engine.total_compile_seconds == before  # nothing compiled


def test_the_same_object_reuses_the_program_and_another_compiles_anew():
    env = Corridor()
    a, b = ppo.make_train(SMALL, env=env), ppo.make_train(SMALL.replace(lr=1e-3), env=env)
    assert a.engine is b.engine
    assert ppo.make_train(SMALL, env=Corridor()).engine is not a.engine
    other_params = (env, CorridorParams(max_steps_in_episode=9))
    assert ppo.make_train(SMALL, env=other_params).engine is not a.engine
    # an import path is imported once per process: one object, one program
    assert (
        ppo.make_train(SMALL, env="test_own_env:make").engine
        is ppo.make_train(SMALL.replace(lr=1e-3), env="test_own_env:make").engine
    )


def test_the_adapter_steps_as_the_object_does_stepped_directly(key):
    """The adapter's reset/step against the env's own reset/step, called directly."""
    env, params = Corridor(), CorridorParams()
    ours = make_env(SMALL.replace(env=env))
    state, obs, mask = ours.reset(key)
    raw_obs, raw_state = env.reset(jax.random.split(key)[1], params)
    np.testing.assert_array_equal(obs, raw_obs)
    assert mask.tolist() == [True, True]
    actions = [1, 0, 1, 1, 1, 1, 1, 1] + [0] * 19 + [1] * 5
    for action in actions:
        _, step_key = jax.random.split(state.key)
        want = env.step(step_key, raw_state, action, params)
        state, out = ours.step(state, jnp.int32(action))
        raw_state = want[1]
        np.testing.assert_array_equal(out.obs, want[0])
        np.testing.assert_array_equal(out.final_obs, want[5]["final_observation"])
        assert (float(out.reward), bool(out.terminated), bool(out.done)) == (
            float(want[2]), bool(want[3]), bool(want[3] | want[4])
        )  # fmt: skip
    assert ours.can_truncate and ours.max_episode_steps == 20


def test_a_gymnax_subclass_steps_through_step_env_with_truncation(key):
    env = make_env(SMALL.replace(env=gymnax_corridor()))
    state, obs, _ = env.reset(key)
    for _ in range(20):  # always "left": the time limit truncates at step 20
        state, out = env.step(state, jnp.int32(0))
    assert bool(out.done) and not bool(out.terminated)
    assert int(jnp.argmax(out.final_obs)) == 0 and int(jnp.argmax(out.obs)) == 0


# ---- slow: learning to the known optimum, vmapped agents, resume, the command line -------

LEARN = SMALL.replace(total_timesteps=8 * 16 * 60, lr=3e-3)  # 60 updates


def _greedy_returns(cfg, params, env, obs_norm=None):
    ev = ppo.evaluate(cfg, params, jax.random.PRNGKey(99), 16, env=env, obs_norm=obs_norm)
    return np.asarray(ev.episode_return).mean(-1)


@pytest.mark.slow  # two 60-update programs (~15 s)
@pytest.mark.parametrize("env", [Corridor(), MaskedCorridor()], ids=["gymnax-style", "Env"])
def test_an_own_environment_learns_to_its_known_optimum(env):
    """make_train(cfg, env=...) under the caller's own jax.vmap over seeds."""
    train = ppo.make_train(LEARN, env=env)
    state, metrics = jax.jit(jax.vmap(train))(jax.random.split(jax.random.PRNGKey(0), 2))
    assert np.all(_greedy_returns(LEARN, state.params, env) == OPTIMUM)
    # a random policy walks back and forth: far from the optimum at the start
    assert np.all(np.asarray(metrics.episode_return)[:, 0] < OPTIMUM - 5)


@pytest.mark.slow  # a sweep, three solo runs (~15 s)
def test_agents_of_an_own_environment_in_one_program_equal_each_alone():
    from conftest import ACROSS_SHAPES, tree_close

    env = Corridor()
    grid = ppo.sweep(SMALL, seeds=3, env=env, lr=[3e-4, 1e-3])
    for lr in (3e-4, 1e-3):
        for seed in range(3):
            one = grid.agent(lr=lr, seed=seed)
            alone = ppo.make_train(SMALL.replace(lr=lr), env=env)(jax.random.PRNGKey(seed))
            assert tree_close((one.state.params, one.metrics), (alone[0].params, alone[1]),
                              **ACROSS_SHAPES)  # fmt: skip


@pytest.mark.slow  # a chunked sweep and its uninterrupted twin (~15 s)
def test_a_checkpointed_own_environment_run_resumes_exactly(tmp_path):
    from conftest import tree_equal

    env, run = Corridor(), tmp_path / "run"
    cfg = SMALL.replace(total_timesteps=8 * 16 * 6)
    first = ppo.sweep(cfg, seeds=2, env=env, run_dir=run, checkpoint_every=2, stop_at=8 * 16 * 2)
    assert not first.finished
    recorded = ppo.rundir.describe(run)
    assert recorded.kind == "train"
    with pytest.raises(ValueError, match="pass the same environment again as env="):
        ppo.resume_sweep(run)  # an object cannot be rebuilt from its name
    with pytest.raises(ppo.rundir.CheckpointError, match="was trained on 'object:test_own_env:Co"):
        ppo.resume_sweep(run, env=MaskedCorridor())
    resumed = ppo.resume_sweep(run, env=env)
    whole = ppo.sweep(cfg, seeds=2, env=env)
    assert resumed.finished
    assert tree_equal((resumed.state, resumed.metrics), (whole.state, whole.metrics))
    # the run directory records the env; loading it needs the same one
    policy = ppo.load_policy(run, env=env, seed=1)
    state, obs, mask = make_env(cfg.replace(env=env)).reset(jax.random.PRNGKey(0))
    assert policy(obs, mask).shape == ()
    ppo.load_policy(run, env=Corridor(), seed=1)  # an equal object: the same description
    with pytest.raises(ValueError, match="it was trained on 'object:test_own_env:Corridor"):
        ppo.load_policy(run, env=(Corridor(), CorridorParams(max_steps_in_episode=9)), seed=1)


@pytest.mark.slow  # a 60-update run through the command line, then its evaluation (~15 s)
def test_the_command_line_trains_an_own_environment_by_import_path(capsys, tmp_path):
    from conftest import cli

    run = tmp_path / "run"
    args = ["--num-envs", 8, "--num-steps", 16, "--minibatch-size", 64, "--update-epochs", 2,
            "--mlp-widths", 16, "--lr", 3e-3, "--total-timesteps", 8 * 16 * 60]  # fmt: skip
    code, out, err = cli(capsys, "train", "--env", "test_own_env:make", *args, "--run-dir", run)
    assert code == 0, err
    assert "# Summary: test_own_env:make" in out
    code, out, err = cli(capsys, "eval", run, "--episodes", 8)
    assert code == 0, err
    rows = [line.split(" | ") for line in out.splitlines() if line.startswith("0 | ")]
    assert float(rows[0][2]) == OPTIMUM  # agent | seed | return | ...
    code, _, err = cli(capsys, "train", "--env", "test_own_env:nothing", *args)
    assert code == 2 and err.strip().count("\n") == 0
    assert "test_own_env has no attribute 'nothing'" in err


@pytest.mark.slow  # a 2-agent PBT run (~10 s)
def test_pbt_trains_an_own_environment():
    env = Corridor()
    res = ppo.pbt(SMALL.replace(total_timesteps=8 * 16 * 4), 2, interval=2, env=env,
                  lr=(1e-4, 1e-3))  # fmt: skip
    assert res.finished and np.isfinite(np.asarray(res.metrics.grad_norm)).all()
    assert np.isfinite(np.nanmean(np.asarray(res.metrics.episode_return), -1)).all()
    assert str(res.config.env) == "object:test_own_env:Corridor"


@pytest.mark.slow  # the guide's example as written: 4 agents × 60 updates (~15 s)
def test_the_guides_own_environment_example_runs_as_written(capsys):
    pytest.importorskip("gymnax")
    import re
    from pathlib import Path

    guide = (Path(__file__).parent.parent / "docs" / "guide.md").read_text()
    section = guide.split("### Your own environment\n")[1].split("\n### ")[0]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
    assert code.count("\n") <= 40
    namespace: dict = {"__name__": "guide_example"}
    exec(compile(code, "docs/guide.md: Your own environment", "exec"), namespace)
    assert np.all(np.asarray(namespace["result"].episode_return) == -5)
    assert capsys.readouterr().out.strip() == "[-5. -5. -5. -5.]"


class _FiveOutputs(Corridor):
    """Older gymnax's ``step``: (obs, state, reward, done, info), no truncation apart."""

    def step(self, key, state, action, params):
        obs, state, reward, terminated, truncated, _ = super().step(key, state, action, params)
        return obs, state, reward, terminated | truncated, {}


class _NoFinalObservation(Corridor):
    """gymnax 1.0's six outputs, but no ``info["final_observation"]`` to bootstrap from."""

    def step(self, key, state, action, params):
        *out, _ = super().step(key, state, action, params)
        return (*out, {})


@pytest.mark.parametrize("env", [_FiveOutputs(), _NoFinalObservation()], ids=["5", "6-no-final"])
def test_without_a_final_observation_every_ending_is_a_termination(env, key):
    ours = make_env(SMALL.replace(env=env))
    assert not ours.can_truncate
    state, _, _ = ours.reset(key)
    for _ in range(20):  # always "left": the env's time limit ends the episode at step 20
        state, out = ours.step(state, jnp.int32(0))
    assert out.final_obs is None
    assert bool(out.done) and bool(out.terminated)  # no bootstrap without the final obs
    assert int(jnp.argmax(out.obs)) == 0  # the next episode's first observation


def test_envs_import_nothing_of_the_trainer():
    """The trainer imports the envs, never the reverse (docs/design.md): the envs' own list
    of reserved stat names is the trainer's `Metrics`, and no module of `purejaxppo.envs`
    imports from the package above it but its error helpers."""
    import ast

    from purejaxppo import Metrics
    from purejaxppo.envs._base import METRIC_NAMES

    assert METRIC_NAMES == Metrics._fields
    for path in (Path(ppo.__file__).parent / "envs").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level >= 2:
                assert node.module == "_errors", f"{path.name} imports ..{node.module}"
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                assert not node.module.startswith("purejaxppo"), (path.name, node.module)
