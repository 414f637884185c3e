"""Craftax's own floor on this backend: its step and its world generation alone, at the
baseline's 1,024 envs, each compiled and timed apart from any trainer.

    python benchmarks/craftax_floor.py OUT classic full [--only craftax_step_64]

For each game writes a line of ``OUT/floor.jsonl``: compile s and ms for a 64-step scan of
Craftax's ``step_env`` (random actions, no resets) over 1,024 envs; the same scan of our
`CraftaxEnv.step` (its pool's resets included); one ``reset_env`` (a new world) for each of
the 1,024 envs; and each program's instruction count. ``masked_step_64`` and
``masked_all_64`` are Craftax's step with its slices of more than one element, or all its
slices, cut by masks (`purejaxppo.envs._slices`); ``masked_points_64`` masks its gathers and
scatters at one index as well. What a trainer's update at this
config cannot beat: its rollout steps every env 64 times (docs/benchmarks.md, "Craftax").
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from purejaxppo.envs._craftax import CraftaxEnv
from purejaxppo.envs._slices import masked_slices

GAMES = {"classic": "Craftax-Classic-Symbolic-v1", "full": "Craftax-Symbolic-v1"}
NUM_ENVS, NUM_STEPS = 1024, 64


def timed(fn, *args, repeats: int = 3) -> dict:
    """Lower, compile and run ``jit(fn)``: seconds to compile, best ms of ``repeats`` runs."""
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(*args))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        best = min(best, time.perf_counter() - t0)
    ops = sum(1 for line in compiled.as_text().splitlines() if " = " in line)
    return dict(compile_s=round(compile_s, 2), ms=round(1e3 * best, 2), hlo_ops=ops)


PARTS = (
    "craftax_step_64", "masked_step_64", "masked_all_64", "masked_points_64", "our_step_64",
    "reset_env",
)  # fmt: skip


def floor(game: str, parts: tuple[str, ...] = PARTS) -> dict:
    ours = CraftaxEnv(GAMES[game])
    env, params = ours.env, ours.params
    keys = jax.random.split(jax.random.PRNGKey(0), NUM_ENVS)
    _, worlds = jax.vmap(env.reset_env, in_axes=(0, None))(keys, params)
    states = jax.vmap(ours.reset)(keys)[0]

    def actions(key):
        return jax.random.randint(key, (NUM_STEPS, NUM_ENVS), 0, ours.num_actions)

    def steps_of(step_env):
        def steps(worlds, key):
            def body(w, xs):
                k, a = xs
                _, w, r, d, _ = jax.vmap(step_env)(jax.random.split(k, NUM_ENVS), w, a)
                return w, r.sum() + d.sum()

            keys = jax.random.split(key, NUM_STEPS)
            return jax.lax.scan(body, worlds, (keys, actions(key)))

        return steps

    def our_steps(states, key):
        def body(s, a):
            s, out = jax.vmap(ours.step)(s, a)
            return s, out.reward.sum() + out.done.sum()

        return jax.lax.scan(body, states, actions(key))

    def new_worlds(keys):
        return jax.vmap(env.reset_env, in_axes=(0, None))(keys, params)

    key = jax.random.PRNGKey(1)
    row = dict(game=game, backend=jax.default_backend(), device=jax.devices()[0].device_kind)
    programs = {
        "craftax_step_64": (steps_of(ours._step_env), worlds, key),
        # Craftax's step_env with its windows cut by masks, and with every indexed read so
        "masked_step_64": (steps_of(masked_slices(ours._step_env, 2)), worlds, key),
        "masked_all_64": (steps_of(masked_slices(ours._step_env)), worlds, key),
        # ... and its gathers and scatters at one index too (not yet in the trainer)
        "masked_points_64": (steps_of(masked_slices(ours._step_env, points=True)), worlds, key),
        "our_step_64": (our_steps, states, key),
        "reset_env": (new_worlds, keys),
    }
    for part in parts:
        row[part] = timed(*programs[part])
    row["obs_floats"] = int(jnp.prod(jnp.array(ours.obs_shape)))
    return row


def main(argv: list[str]) -> int:
    parts = PARTS
    if "--only" in argv:
        at = argv.index("--only")
        parts, argv = tuple(argv[at + 1].split(",")), argv[:at] + argv[at + 2 :]
    if len(argv) < 2 or any(g not in GAMES for g in argv[1:]) or set(parts) - set(PARTS):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    for game in argv[1:]:
        row = floor(game, parts)
        print(json.dumps(row), flush=True)
        with open(out / "floor.jsonl", "a") as f:
            f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
