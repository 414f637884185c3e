"""Throughput measurements shared by ``purejaxppo bench`` and ``benchmarks/``.

`time_updates` is the one definition of "aggregate steps/s at N agents": the engine's
one-update program is compiled (timed apart) and warmed up, then ``updates`` calls are timed
and averaged. `time_full_run` times a whole run (init + every update) end to end.
"""

from __future__ import annotations

import time
from typing import NamedTuple

import jax
import numpy as np
from jax.sharding import Mesh

from ._agents import agent_inputs
from ._config import PPOConfig
from ._engine import Engine
from ._placement import mesh_for
from ._programs import Run

#: PureJaxRL's ``ppo.py`` config (its ``__main__``, without DEBUG): CartPole-v1, 4 envs ×
#: 128 steps, 4 epochs of 4 minibatches; ``PPOConfig.from_purejaxrl`` reads it.
PUREJAXRL_CARTPOLE = dict(
    LR=2.5e-4, NUM_ENVS=4, NUM_STEPS=128, TOTAL_TIMESTEPS=5e5, UPDATE_EPOCHS=4,
    NUM_MINIBATCHES=4, GAMMA=0.99, GAE_LAMBDA=0.95, CLIP_EPS=0.2, ENT_COEF=0.01, VF_COEF=0.5,
    MAX_GRAD_NORM=0.5, ACTIVATION="tanh", ENV_NAME="CartPole-v1", ANNEAL_LR=True,
)  # fmt: skip


#: Craftax_Baselines' ``ppo_rnn.py`` config (its defaults: 1,024 envs × 64 steps, 8 minibatches,
#: 4 epochs, a GRU of 512 behind one layer of 512 and heads of two 512 layers), as our fields;
#: ``total_timesteps`` is ten updates: the benchmarks set their own length.
CRAFTAX_BASELINE = dict(
    network="gru", hidden_size=512, conv_channels=(), mlp_widths=(512,), head_widths=(512, 512),
    num_envs=1024, num_steps=64, minibatch_size=8192, update_epochs=4, lr=2e-4, anneal_lr=True,
    gamma=0.99, gae_lambda=0.8, clip_eps=0.2, ent_coef=0.01, vf_coef=0.5, max_grad_norm=1.0,
    normalize_advantages=True, clip_value=True, adam_eps=1e-5, total_timesteps=655_360,
)  # fmt: skip


class Throughput(NamedTuple):
    """One measurement: ``agents`` agents of one config, one-update programs."""

    agents: int
    group_size: int  # agents per group on each device in the timed program
    compile_s: float  # every program this measurement compiled (init and one update)
    update_s: float  # seconds per update of all agents together, after warm-up
    steps_per_s: float  # all agents together
    steps_per_s_per_agent: float


def time_updates(
    cfg: PPOConfig,
    agents: int,
    updates: int = 2,
    mesh: Mesh | None | bool = None,
    group_size: int | None = None,
) -> Throughput:
    """Aggregate steps/s of ``agents`` agents (seeds 0…N-1) over ``updates`` timed updates,
    in groups of ``group_size`` (None: the backend's default, see `Engine`)."""
    if not isinstance(updates, int) or updates < 1:
        raise ValueError(f"time_updates(updates={updates!r}): need a positive int.")
    engine = Engine(cfg, mesh=mesh_for(mesh, agents), group_size=group_size)
    keys, hp, _ = agent_inputs(cfg, {}, list(range(agents)))
    engine.compile_ahead(1, keys, hp)  # on an accelerator: while init compiles
    state = engine.init(keys, hp)
    state, m = engine.run(state, hp, 1)  # compiles the 1-update program and warms up
    jax.block_until_ready(m)
    t0 = time.perf_counter()
    for _ in range(updates):
        state, m = engine.run(state, hp, 1)
    jax.block_until_ready(m)
    update_s = (time.perf_counter() - t0) / updates
    return Throughput(
        agents=agents,
        group_size=engine.groups[(Run(1), agents)],
        compile_s=engine.compile_seconds,
        update_s=update_s,
        steps_per_s=agents * cfg.batch_size / update_s,
        steps_per_s_per_agent=cfg.batch_size / update_s,
    )


class FullRun(NamedTuple):
    agents: int
    total_s: float  # compile + run
    compile_s: float
    final_return: float  # mean over agents of the last 10 updates' mean episode return


def time_full_run(cfg: PPOConfig, agents: int, mesh: Mesh | None | bool = None) -> FullRun:
    """The whole run of ``agents`` agents (one program: init + every update), end to end."""
    engine = Engine(cfg, mesh=mesh_for(mesh, agents))
    keys, hp, _ = agent_inputs(cfg, {}, list(range(agents)))
    t0 = time.perf_counter()
    _, metrics = engine(keys, hp)
    jax.block_until_ready(metrics)
    total = time.perf_counter() - t0
    ret = engine.strip(metrics, agents).episode_return[:, -10:]
    return FullRun(agents, total, engine.compile_seconds, float(np.nanmean(ret)))
