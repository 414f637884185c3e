"""How long the engine takes to trace and lower Craftax's chunk programs, in the main thread
and in a background thread: what a run from the persistent cache spends before its first
update (docs/experiments/craftax-tpu.md: 28.9 s for one trace on the TPU host, in the
background, against 3 s on a 2-core Xeon).

    python benchmarks/trace_time.py OUT [classic|full]

Craftax_Baselines' config (1,024 envs × 64 steps, GRU 512, one agent), the programs of a
305-update run in chunks of 31 (31 and its tail of 26). Each is traced and lowered by the
engine (`Engine._lower`, as `run` and `compile_ahead` do; nothing compiles), first in this
thread, then each again in a fresh background thread, so the two columns are each a first
and a second trace alike. Prints and appends to ``OUT/trace.jsonl`` one line of seconds.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import jax

from purejaxppo import PPOConfig
from purejaxppo._agents import agent_inputs, batched
from purejaxppo._bench import CRAFTAX_BASELINE
from purejaxppo._engine import Engine
from purejaxppo._programs import INIT, Run

GAMES = {"classic": "Craftax-Classic-Symbolic-v1", "full": "Craftax-Symbolic-v1"}


def lower_seconds(engine: Engine, n: int, state, hp) -> float:
    t0 = time.perf_counter()
    engine._lower(Run(n), 1, engine.group_width(1), (state, hp))
    return time.perf_counter() - t0


def main(out: Path, game: str) -> dict:
    cfg = PPOConfig(env=f"craftax/{GAMES[game]}", **CRAFTAX_BASELINE)
    row: dict = {"game": game, "backend": jax.default_backend()}
    t0 = time.perf_counter()
    engine = Engine(cfg, mesh=False)
    keys, hp, _ = agent_inputs(cfg, {}, [0])
    keys, hp = engine._place((keys, batched(hp, 1)), 1)
    state = jax.eval_shape(engine.program(INIT, 1), keys, hp)
    row["setup_s"] = time.perf_counter() - t0
    for n in (31, 26):
        row[f"main_{n}_s"] = lower_seconds(engine, n, state, hp)
    for n in (31, 26):
        box: list[float] = []
        args = (engine, n, state, hp)
        thread = threading.Thread(
            target=lambda box=box, args=args: box.append(lower_seconds(*args))
        )
        thread.start()
        thread.join()
        row[f"thread_{n}_s"] = box[0]
    row = {k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "trace.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row), flush=True)
    return row


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "classic")
