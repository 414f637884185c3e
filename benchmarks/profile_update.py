"""Where an update's time goes: trace a few updates on any backend, read the trace anywhere.

Record (on the machine with the accelerator; one process holds the chip)::

    python benchmarks/profile_update.py record OUT maze1 maze256 cartpole2048

writes, per case, ``OUT/<case>.xplane.pb`` (a `jax.profiler` trace of one update of every
agent), ``OUT/<case>.hlo.txt.gz`` (the compiled program, whose op metadata names each op's
phase) and a line of ``OUT/results.jsonl`` (compile s, s per update, steps/s, XLA's memory
plan). Read (on any machine, e.g. the CPU one the trace was copied to)::

    python benchmarks/profile_update.py read OUT/maze256.xplane.pb OUT/maze256.hlo.txt.gz

prints the device's op time per update by phase (the named scopes of `_ppo.update_step`:
rollout, env step, GAE, shuffle, minibatch gather, forward/backward, optimiser, the rest of
`learn`, and what lies outside them), by op kind, and the costliest ops. Figures from a TPU
v5e chip: docs/benchmarks.md, "On a TPU".

Cases: ``maze<N>`` (the default config, N agents), ``cartpole<N>`` (PureJaxRL's ``ppo.py``
config, N agents; needs gymnax). On a CPU the trace holds host threads, not device ops, and
``read`` finds none: record on the accelerator.
"""

from __future__ import annotations

import collections
import gzip
import json
import re
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import jax

from purejaxppo import PPOConfig
from purejaxppo._agents import agent_inputs, batched
from purejaxppo._bench import PUREJAXRL_CARTPOLE
from purejaxppo._engine import Engine
from purejaxppo._programs import Run

#: Phases in the order they are tested: an op belongs to the first whose scope it is in.
PHASES = (
    ("env_step", "rollout: env step"),
    ("rollout", "rollout: policy, sampling, buffer"),
    ("gae", "bootstrap + GAE"),
    ("shuffle", "learn: shuffle"),
    ("gather", "learn: minibatch rows"),
    ("loss_and_grad", "learn: forward/backward"),
    ("optimizer", "learn: optimiser"),
    ("learn", "learn: the rest (skip checks, flat parameters)"),
)
OUTSIDE = "outside the phases (metrics, health, loop)"


def config(case: str) -> tuple[PPOConfig, int]:
    m = re.fullmatch(r"(maze|cartpole)(\d+)", case)
    if m is None:
        raise SystemExit(f"profile_update: unknown case {case!r}; use maze<N> or cartpole<N>.")
    if m.group(1) == "maze":
        return PPOConfig(), int(m.group(2))
    with warnings.catch_warnings():  # 5e5 steps are not a whole number of updates
        warnings.simplefilter("ignore")
        return PPOConfig.from_purejaxrl(PUREJAXRL_CARTPOLE), int(m.group(2))


def record(out: Path, case: str, timed: int = 2) -> dict:
    """Compile the one-update program of ``case``, time ``timed`` updates, trace one."""
    cfg, n = config(case)
    engine = Engine(cfg, mesh=False)
    keys, hp, _ = agent_inputs(cfg, {}, list(range(n)))
    state = engine.init(keys, hp)
    before = engine.compile_seconds
    state, metrics = engine.run(state, hp, 1)
    jax.block_until_ready(metrics)
    compile_s = engine.compile_seconds - before
    placed = engine._place(batched(hp, n), n)
    program = engine.compiled(Run(1), n, state, placed)
    with gzip.open(out / f"{case}.hlo.txt.gz", "wt") as f:
        f.write(program.as_text())
    t0 = time.perf_counter()
    for _ in range(timed):
        state, metrics = engine.run(state, hp, 1)
    jax.block_until_ready(metrics)
    update_s = (time.perf_counter() - t0) / timed
    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp):
            jax.block_until_ready(engine.run(state, hp, 1))
        for path in Path(tmp).rglob("*.xplane.pb"):
            shutil.copy(path, out / f"{case}.xplane.pb")
    memory = program.memory_analysis()
    row = dict(
        case=case, agents=n, backend=jax.default_backend(), device=jax.devices()[0].device_kind,
        jax=jax.__version__, compile_s=round(compile_s, 2), update_s=update_s,
        steps_per_s=n * cfg.batch_size / update_s, temp_bytes=memory.temp_size_in_bytes,
    )  # fmt: skip
    with open(out / "results.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
    return row


def op_scopes(hlo_text: str) -> dict[str, str]:
    """Each instruction's name → its ``op_name`` metadata (the JAX name stack)."""
    pattern = re.compile(r"\s*(?:ROOT )?%?([\w.\-]+) = .*?metadata=\{[^}]*op_name=\"([^\"]*)\"")
    return {m.group(1): m.group(2) for m in map(pattern.match, hlo_text.splitlines()) if m}


def phase(op_name: str) -> str:
    """The phase of an op from its name stack (transforms such as ``vmap(x)`` unwrapped)."""
    parts = {re.sub(r"^\w+\((.*)\)$", r"\1", p) for p in op_name.split("/")}
    for scope, label in PHASES:
        if scope in parts:
            return label
    return OUTSIDE


def read(xplane: str, hlo: str, updates: int = 1, top: int = 15) -> dict[str, float]:
    """Print the device op time of ``updates`` traced updates by phase, kind and op; return
    ms per update by phase."""
    opener = gzip.open if hlo.endswith(".gz") else open
    with opener(hlo, "rt") as f:
        scopes = op_scopes(f.read())
    by_phase, by_kind, by_op = collections.Counter(), collections.Counter(), collections.Counter()
    data = jax.profiler.ProfileData.from_file(xplane)
    for plane in data.planes:
        if not plane.name.startswith("/device:"):
            continue
        for line in plane.lines:
            if line.name != "XLA Ops":
                continue
            for event in line.events:
                m = re.match(r"%?([\w.\-]+) = (?:\(.*?\)|\S+) ([\w\-]+)\(", event.name)
                name, kind = (m.group(1), m.group(2)) if m else (event.name.split()[0], "?")
                if kind in ("while", "conditional", "call"):  # their bodies' ops count
                    continue
                if kind == "fusion":
                    fused = re.search(r"kind=(k\w+)", event.name)
                    kind = f"fusion:{fused.group(1) if fused else '?'}"
                ms = event.duration_ns / 1e6 / updates
                where = phase(scopes.get(name, ""))
                by_phase[where] += ms
                by_kind[kind] += ms
                by_op[(where, name, kind)] += ms
    total = sum(by_phase.values())
    if not total:
        print(f"{xplane}: no device ops (a CPU trace?): record on the accelerator.")
        return {}
    print(f"device op time: {total:.1f} ms per update")
    for title, table in (("phase", by_phase), ("op kind", by_kind)):
        print(f"-- by {title}")
        for key, ms in table.most_common(12):
            print(f"  {key:48s} {ms:9.2f} ms {100 * ms / total:5.1f} %")
    print("-- costliest ops")
    for (where, name, kind), ms in by_op.most_common(top):
        print(f"  {ms:9.2f} ms  {where[:34]:34s} {name[:28]:28s} {kind}")
    return dict(by_phase)


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "record":
        out = Path(argv[1])
        out.mkdir(parents=True, exist_ok=True)
        for case in argv[2:]:
            print(json.dumps(record(out, case)), flush=True)
        return 0
    if len(argv) == 3 and argv[0] == "read":
        read(argv[1], argv[2])
        return 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
