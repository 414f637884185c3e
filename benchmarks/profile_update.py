"""Where an update's time goes: trace a few updates on any backend, read the trace anywhere.

Record (on the machine with the accelerator; one process holds the chip)::

    python benchmarks/profile_update.py record OUT maze1 maze256 cartpole2048

writes, per case, ``OUT/<case>.xplane.pb.gz`` (a `jax.profiler` trace of one update of every
agent, gzipped), ``OUT/<case>.hlo.txt.gz`` (the compiled program, whose op metadata names each op's
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
from purejaxppo._bench import CRAFTAX_BASELINE, PUREJAXRL_CARTPOLE
from purejaxppo._engine import Engine
from purejaxppo._programs import Run
from purejaxppo._xla_cpu import compiler_options

#: Phases in the order they are tested: an op belongs to the first whose scope it is in.
PHASES = (
    ("craftax_step", "rollout: Craftax's own step"),
    ("auto_reset", "rollout: auto-resets"),
    ("env_step", "rollout: env step"),
    ("refresh", "reset pools: new worlds"),
    ("rollout", "rollout: policy, sampling, buffer"),
    ("gae", "bootstrap + GAE"),
    ("shuffle", "learn: shuffle"),
    ("gather", "learn: minibatch rows"),
    ("gru_loop", "learn: GRU loop, forward/backward"),
    ("encoder", "learn: encoder + input gates, fwd/bwd"),
    ("heads", "learn: heads, forward/backward"),
    ("loss_and_grad", "learn: forward/backward"),
    ("optimizer", "learn: optimiser"),
    ("learn", "learn: the rest (skip checks, flat parameters)"),
)
OUTSIDE = "outside the phases (metrics, health, loop)"


#: ``craftax-classic<N>`` and ``craftax-full<N>``: Craftax_Baselines' ``ppo_rnn.py`` config.
CRAFTAX_ENVS = {
    "craftax-classic": "craftax/Craftax-Classic-Symbolic-v1",
    "craftax-full": "craftax/Craftax-Symbolic-v1",
}


def config(case: str) -> tuple[PPOConfig, int]:
    m = re.fullmatch(r"(maze|cartpole|craftax-classic|craftax-full)(\d+)", case)
    if m is None:
        raise SystemExit(
            f"profile_update: unknown case {case!r}; use maze<N>, cartpole<N>, "
            "craftax-classic<N> or craftax-full<N>."
        )
    if m.group(1) == "maze":
        return PPOConfig(), int(m.group(2))
    if m.group(1) in CRAFTAX_ENVS:
        return PPOConfig(env=CRAFTAX_ENVS[m.group(1)], **CRAFTAX_BASELINE), int(m.group(2))
    with warnings.catch_warnings():  # 5e5 steps are not a whole number of updates
        warnings.simplefilter("ignore")
        return PPOConfig.from_purejaxrl(PUREJAXRL_CARTPOLE), int(m.group(2))


def record(out: Path, case: str, timed: int = 2, prepared=None, label: str = "") -> dict:
    """Compile the one-update program of ``case``, time ``timed`` updates, trace one, and
    summarise the trace here (`read`). ``prepared``: `prepare`'s result, to profile a
    variant (a module patched before lowering) from the same initial state; ``label`` names
    the variant's files."""
    engine, cfg, n, state, placed, init_s, init_compile_s = prepared or prepare(case)
    name = case + label
    # The one-update program, lowered (jax's tracing) and compiled (XLA) apart, the compile
    # traced: its host events name XLA's passes (`compile_passes`).
    t0 = time.perf_counter()
    lowered = engine._lower(Run(1), n, engine.group_width(n), (state, placed))
    lower_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        with jax.profiler.trace(tmp):
            program = lowered.compile(compiler_options())
        compile_s = time.perf_counter() - t0
        for path in Path(tmp).rglob("*.xplane.pb"):
            passes = compile_passes(str(path))
    hlo = out / f"{name}.hlo.txt.gz"
    with gzip.open(hlo, "wt") as f:
        f.write(program.as_text())
    state, metrics = program(state, placed)  # warm-up
    jax.block_until_ready(metrics)
    t0 = time.perf_counter()
    for _ in range(timed):
        state, metrics = program(state, placed)
    jax.block_until_ready(metrics)
    update_s = (time.perf_counter() - t0) / timed
    with tempfile.TemporaryDirectory() as tmp:
        with jax.profiler.trace(tmp):
            jax.block_until_ready(program(state, placed))
        for path in Path(tmp).rglob("*.xplane.pb"):
            with open(path, "rb") as f, gzip.open(out / f"{name}.xplane.pb.gz", "wb") as g:
                shutil.copyfileobj(f, g)  # compressed: a Craftax update's trace is > 16 MiB
            phase_ms = read(str(path), str(hlo))
    memory = program.memory_analysis()
    row = dict(
        case=name, agents=n, backend=jax.default_backend(), device=jax.devices()[0].device_kind,
        jax=jax.__version__, init_s=round(init_s, 2), init_compile_s=round(init_compile_s, 2),
        lower_s=round(lower_s, 2), compile_s=round(compile_s, 2), update_s=update_s,
        steps_per_s=n * cfg.batch_size / update_s, temp_bytes=memory.temp_size_in_bytes,
        phase_ms={k: round(v, 2) for k, v in phase_ms.items()},
        hlo_ops=ops_by_phase(program.as_text()), compile_passes=passes,
    )  # fmt: skip
    with open(out / "results.jsonl", "a") as f:
        f.write(json.dumps(row) + "\n")
    return row


def prepare(case: str) -> tuple:
    """``case``'s engine, config, agent count, initial state (its init compiled and run,
    timed) and placed hyperparameters: what `record` profiles from."""
    cfg, n = config(case)
    engine = Engine(cfg, mesh=False)
    keys, hp, _ = agent_inputs(cfg, {}, list(range(n)))
    t0 = time.perf_counter()
    state = engine.init(keys, hp)
    jax.block_until_ready(state)
    init_s, init_compile_s = time.perf_counter() - t0, engine.compile_seconds
    placed = engine._place(batched(hp, n), n)
    return engine, cfg, n, state, placed, init_s, init_compile_s


def op_scopes(hlo_text: str) -> dict[str, str]:
    """Each instruction's name → its ``op_name`` metadata (the JAX name stack). An instruction
    without one (XLA made it: a gather expanded into a loop, a copy) takes that of the
    instruction whose computation it is in (the loop, the fusion), so its time is not lost to
    "outside the phases"."""
    instruction = re.compile(r"\s*(?:ROOT )?%?([\w.\-]+) = ")
    own, computation_of, caller = {}, {}, {}
    computation = ""
    for line in hlo_text.splitlines():
        if line[:1] not in ("", " ") and line.rstrip().endswith("{"):
            computation = line.split()[1 if line.startswith("ENTRY") else 0].lstrip("%")
            continue
        m = instruction.match(line)
        if m is None:
            continue
        name = m.group(1)
        computation_of[name] = computation
        if scope := re.search(r'metadata=\{[^}]*op_name="([^"]*)"', line):
            own[name] = scope.group(1)
        called = re.findall(r"(?:calls|body|condition|to_apply)=%?([\w.\-]+)", line)
        for branches in re.findall(r"branch_computations=\{([^}]*)\}", line):
            called += [b.strip().lstrip("%") for b in branches.split(",")]
        for c in called:
            caller.setdefault(c, name)

    def scope_of(name: str) -> str:
        for _ in range(64):  # nesting depth: loops in fusions in loops
            if name in own:
                return own[name]
            name = caller.get(computation_of.get(name, ""), "")
        return ""

    return {name: scope_of(name) for name in computation_of}


def ops_by_phase(hlo_text: str) -> dict[str, int]:
    """How many instructions of the compiled program each phase holds (its size by part)."""
    counts = collections.Counter(phase(s) for s in op_scopes(hlo_text).values())
    return dict(counts.most_common())


def compile_passes(xplane: str, top: int = 25) -> dict[str, float]:
    """Seconds of the host's traced events during a compile, summed by name (XLA's passes and
    pipelines; nested events each count), the ``top`` costliest."""
    by_name = collections.Counter()
    for plane in jax.profiler.ProfileData.from_file(xplane).planes:
        if plane.name.startswith("/device:"):
            continue
        for line in plane.lines:
            for event in line.events:
                by_name[event.name[:80]] += event.duration_ns / 1e9
    return {k: round(v, 2) for k, v in by_name.most_common(top)}


def unwrap(part: str) -> str:
    """``transpose(jvp(gru_loop))`` → ``gru_loop``: a name stack's transforms removed."""
    while (inner := re.sub(r"^\w+\((.*)\)$", r"\1", part)) != part:
        part = inner
    return part


def phase(op_name: str) -> str:
    """The phase of an op from its name stack (transforms such as ``vmap(x)`` unwrapped)."""
    parts = {unwrap(p) for p in op_name.split("/")}
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


def gunzipped(path: str) -> str:
    """``path``, or for a ``.pb.gz`` trace the path of its uncompressed copy (ProfileData
    reads plain files only)."""
    if not path.endswith(".pb.gz"):
        return path
    plain = Path(tempfile.mkdtemp()) / Path(path[:-3]).name
    with gzip.open(path, "rb") as f, open(plain, "wb") as g:
        shutil.copyfileobj(f, g)
    return str(plain)


def main(argv: list[str]) -> int:
    if len(argv) >= 3 and argv[0] == "record":
        out = Path(argv[1])
        out.mkdir(parents=True, exist_ok=True)
        for case in argv[2:]:
            print(json.dumps(record(out, case)), flush=True)
        return 0
    if len(argv) == 3 and argv[0] == "read":
        read(*(gunzipped(a) for a in argv[1:]))
        return 0
    print(__doc__.split("\n\n")[1], file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
