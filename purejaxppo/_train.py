"""`make_train(cfg)`: the one-agent view of the engine.

``train = make_train(cfg)`` is a pure function of a key: ``train(key) -> (state, metrics)``
runs ``cfg.num_updates`` updates as one `lax.scan` inside one compiled program. It is the
`Engine`'s ``"train"`` program for one agent, with the agent axis taken off, so a lone
agent, a sweep and a checkpointed run all execute one definition.

Called with concrete arrays it runs the engine's compiled program (ahead-of-time compiled
once per input structure, with the backend's compiler options). Called under a caller's own
transformation (`jax.vmap` over seeds, `jax.jit`, `jax.make_jaxpr`) it traces the same
function inline, as a nested jit, so it composes like any JAX function. Which path runs is
decided by the inputs' types (tracers or not), never by catching an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import equinox as eqx
import jax
import numpy as np
from jaxtyping import PRNGKeyArray

from ._agents import batched
from ._config import PPOConfig
from ._engine import engine_for
from ._ppo import Metrics, RunnerState
from ._programs import TRAIN
from ._progress import ProgressFn
from .rundir._format import config_to_json
from .stats import final_scores
from .tracking import Finished, TrackedAgent, TrackedRun, Tracker
from .tracking._recorder import RELAY, as_trackers
from .tracking._runs import finish, run_name, tracked


class Train:
    """The pure training function returned by `make_train` (call it like a function).

    ``train(key, config=None)`` returns ``(RunnerState, Metrics)``, the metrics with a
    leading ``num_updates`` axis. ``config`` supplies the numeric hyperparameters (which may
    be traced, e.g. under `jax.vmap`); its static fields must equal ``cfg``'s.
    Hyperparameters always enter as traced float32 scalars, so new values never recompile.
    """

    def __init__(self, cfg: PPOConfig, progress: ProgressFn | None = None, trackers=()):
        self.cfg = cfg
        self.progress = progress
        self.trackers = trackers
        # One device, no sharding: a user's own `vmap` or `sweep` decides placement. The
        # engine is shared with every trainer of the same static config (no recompiles).
        if trackers:  # the relay (`tracking.tracked`) feeds the trackers and ``progress``
            self.engine = engine_for(cfg, mesh=False, progress=RELAY, progress_agents=True)
        else:
            self.engine = engine_for(cfg, mesh=False, progress=progress)
        self.env = self.engine.env  # the environment the agent trains on
        self._inline = eqx.filter_jit(self._one_agent)

    @property
    def num_traces(self) -> int:
        """Times the engine's training scan was traced (compiled or inlined) so far, by any
        trainer of this static config: tests check it."""
        return self.engine.num_traces

    def __call__(
        self, key: PRNGKeyArray, config: PPOConfig | None = None
    ) -> tuple[RunnerState, Metrics]:
        _check_key(key)
        hp = self._hyperparameters(config)
        if _is_traced((key, hp)):  # inside the caller's jit/vmap: trace the same program
            if self.trackers:
                raise ValueError(
                    "make_train(tracker=...) logs calls with a concrete key; under jax.jit or "
                    "jax.vmap, train many agents with sweep(cfg, seeds=N, tracker=...) instead."
                )
            return self._inline(key, hp)
        keys, hp = key[None], batched(hp, 1)
        if not self.trackers:
            return _first(self.engine(keys, hp))
        agent = TrackedAgent(
            0, "agent", {}, config_to_json(config or self.cfg), self.cfg.batch_size
        )
        run = TrackedRun("train", run_name(None, "train"), (agent,))
        with tracked(self.trackers, lambda: run, self.progress) as (_, recorder):
            if recorder is not None:
                recorder.start()
            out = jax.block_until_ready(_first(self.engine(keys, hp)))
            score = final_scores(np.asarray(out[1].episode_return)[None])[0]
            table = [{"return_mean": float(score) if np.isfinite(score) else None}]
            finish(recorder, Finished(table, [table[0]["return_mean"]]))
        return out

    def _one_agent(self, key: PRNGKeyArray, hp: PPOConfig):
        return _first(self.engine.program(TRAIN, 1)(key[None], batched(hp, 1)))

    # ---- chunked training (checkpoints): the same scan body, K updates per program call ----
    def init(self, key: PRNGKeyArray, config: PPOConfig | None = None) -> RunnerState:
        """The initial state ``train(key)`` starts from (network, optimiser, envs, key)."""
        return _first(self.engine.init(key[None], batched(self._hyperparameters(config), 1)))

    def run(
        self, state: RunnerState, num_updates: int, config: PPOConfig | None = None
    ) -> tuple[RunnerState, Metrics]:
        """Continue training ``state`` for ``num_updates`` updates (one compiled scan).

        ``train(key)`` equals ``init(key)`` followed by chunks of ``run`` that add up to
        ``cfg.num_updates``, bit for bit (one program body; tested); each chunk size compiles
        once.
        """
        hp = batched(self._hyperparameters(config), 1)
        state = jax.tree.map(lambda x: x[None], state)
        return _first(self.engine.run(state, hp, num_updates))

    def compile(self, key: PRNGKeyArray, config: PPOConfig | None = None):
        """Compile ahead of time; returns ``compiled(key, config=None)``, which never traces.

        Lets callers time compilation and running separately (the CLI and benchmarks do).
        """
        hp = batched(self._hyperparameters(config), 1)
        compiled = self.engine.compiled(TRAIN, 1, key[None], hp)

        def run(key: PRNGKeyArray, config: PPOConfig | None = None):
            return _first(compiled(key[None], batched(self._hyperparameters(config), 1)))

        return run

    def _hyperparameters(self, config: PPOConfig | None) -> PPOConfig:
        config = self.cfg if config is None else config
        if config.static_fields() != self.cfg.static_fields():
            diff = {
                k: v for k, v in config.static_fields().items() if self.cfg.static_fields()[k] != v
            }
            raise ValueError(
                f"train(key, config): static fields {sorted(diff)} differ from the config given "
                "to make_train; they fix shapes, so call make_train with that config instead."
            )
        return config.traced()


def make_train(
    cfg: PPOConfig,
    progress: ProgressFn | None = None,
    *,
    env: Any = None,
    tracker: Tracker | Sequence[Tracker] | None = None,
) -> Train:
    """Build the one-program trainer for ``cfg`` (see `Train`).

    ``progress(Progress)``, if given, is called on the host for every update from inside
    the compiled program (a `jax.debug.callback` per block of updates), as for `sweep`.
    ``env``: your own environment, as ``cfg.replace(env=env)`` takes it (a gymnax-style
    env, ``(env, params)``, a `purejaxppo.envs.Env`, or ``"package.module:attr"``); it is
    built and traced here, and refused in one line, before anything compiles. ``tracker``
    (`purejaxppo.tracking.WandB`, `TensorBoard`, or a list): each ``train(key)`` call with a
    concrete key is one tracked run of its agent (many agents: `sweep` with ``tracker``).
    """
    if not isinstance(cfg, PPOConfig):
        raise TypeError(f"make_train expects a PPOConfig, got {type(cfg).__name__}.")
    trackers = as_trackers(tracker, "make_train")
    return Train(cfg if env is None else cfg.replace(env=env), progress, trackers)


def _check_key(key: Any) -> None:
    if not hasattr(key, "shape") or not hasattr(key, "dtype"):
        raise TypeError(
            f"train(key): key={key!r} is not a PRNG key array; give jax.random.PRNGKey(seed) "
            "(or jax.random.key(seed))."
        )


def _is_traced(tree: Any) -> bool:
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(tree))


def _first(tree: Any) -> Any:
    """Take the (single) agent off the leading axis."""
    return jax.tree.map(lambda x: x[0], tree)
