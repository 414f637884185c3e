"""Host memory, checked before anything compiles: a sweep's or a population's metrics and
states must fit the host (the engine checks each program against its device)."""

from __future__ import annotations

import jax

from ._config import PPOConfig
from ._engine import engine_for
from ._memory import BUDGET_FRACTION, available_bytes, format_bytes
from ._ppo import Metrics, init_state
from .envs._registry import episode_stat_count


def check_host_memory(
    bases: list[PPOConfig], num_agents: int, chunked: bool, extra_per_update: int = 0
) -> None:
    """Refuse, before compiling, a sweep whose host-side arrays cannot fit in memory: the
    metrics of every update (11 fields and the env's episode statistics, 4 bytes each per
    agent per update: they grow with total_timesteps) and the agents' final states (with
    checkpoints: the host copy, its serialisation and the file's bytes). The program's own
    memory is the engine's check.
    ``extra_per_update``: more host bytes per agent per update (PBT's schedules)."""
    have = int(available_bytes() * BUDGET_FRACTION)
    fields = len(Metrics._fields) - 1  # episode_stats: one field per statistic
    metrics = sum(
        num_agents * b.num_updates * ((fields + episode_stat_count(b)) * 4 + extra_per_update)
        for b in bases
    )
    if metrics > have:
        fit = have // max(1, metrics // num_agents)
        updates = sum(b.num_updates for b in bases)
        fix = (
            f"train at most {fit} agents at once"
            if fit
            else f"lower total_timesteps (about {updates * have // metrics:,} updates fit)"
        )
        raise ValueError(
            f"the metrics of {num_agents} agent(s) × {max(b.num_updates for b in bases):,} "
            f"updates need {format_bytes(metrics)}, and {format_bytes(have)} is available; "
            f"{fix}."
        )
    per_agent = metrics / num_agents
    for b in bases:
        env = engine_for(b, mesh=False).env
        state = jax.eval_shape(lambda k, b=b, env=env: init_state(b, env, k), jax.random.PRNGKey(0))
        per_agent += sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(state)) * (
            4 if chunked else 2
        )
    if per_agent * num_agents > have:
        raise ValueError(
            f"{num_agents} agent(s) need {format_bytes(per_agent * num_agents)} of host memory "
            f"for their states and metrics ({format_bytes(per_agent)} each), and "
            f"{format_bytes(have)} is available; train at most {int(have // per_agent)} "
            "agents at once."
        )


def check_pbt_memory(cfg: PPOConfig, population: int, ranges: dict, chunked: bool) -> None:
    """Refuse, in about a second and before anything is written or compiled, a population
    whose host-side arrays cannot fit in memory: `check_host_memory`'s metrics and states,
    plus each tuned field's schedule (one float32 per agent per update)."""
    check_host_memory([cfg], population, chunked, extra_per_update=4 * len(ranges))
