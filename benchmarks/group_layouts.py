"""Aggregate steps/s of group layouts against one agent, in one process (issue 24's tables).

    python benchmarks/group_layouts.py CONFIG LAYOUTS UPDATES ROUNDS

CONFIG: ``'{}'`` (the medium-maze default), a JSON object of `PPOConfig` fields,
``cartpole`` (PureJaxRL's CartPole config) or ``pendulum`` (its continuous config on gymnax
Pendulum-v1, as in bench_vs_purejaxrl.py; needs gymnax), either name optionally followed by
``+`` and a JSON object of `PPOConfig` fields that replace its own. LAYOUTS: JSON
``{"agents": [G, ...]}``; G = 0 is the backend's default width, G ≥ agents is all at once;
``"one:G"`` runs those agents on one CPU device instead of split over the devices.
Every layout is compiled and run once first; then ROUNDS rounds alternate over the layouts,
UPDATES updates each, and the medians are printed as aggregate steps/s and × one agent. The
agents are placed as `sweep` places them (over every device; one agent unsharded). E.g.

    python benchmarks/group_layouts.py '{}' '{"4":[0],"16":[0],"64":[0],"256":[0]}' 1 5
    python benchmarks/group_layouts.py cartpole '{"64":[1,4,8,16,32]}' 10 4
    python benchmarks/group_layouts.py pendulum '{"16":[0,1,2,"one:0","one:1"]}' 3 3
    python benchmarks/group_layouts.py 'cartpole+{"minibatch_size":512}' '{"16":[1,2,4]}' 10 3
"""

import json
import statistics
import sys
import time
import warnings

import jax

from purejaxppo import PPOConfig
from purejaxppo._bench import PUREJAXRL_CARTPOLE
from purejaxppo._engine import Engine, agent_inputs, mesh_for
from purejaxppo._programs import Run

CARTPOLE = PUREJAXRL_CARTPOLE  # PureJaxRL's ppo.py config


def main() -> None:
    spec, layouts_json, updates, rounds = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:5])
    spec, _, overrides = spec.partition("+")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 5e5 is not a multiple of the batch: as PureJaxRL
        if spec == "cartpole":
            cfg = PPOConfig.from_purejaxrl(CARTPOLE)
        elif spec == "pendulum":
            from bench_vs_purejaxrl import PENDULUM  # this script's folder is on sys.path

            cfg = PPOConfig.from_purejaxrl(PENDULUM)
        else:
            cfg = PPOConfig(**json.loads(spec))
    if overrides:
        cfg = cfg.replace(
            **{k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(overrides).items()}
        )
    layouts = {"one": (1, None, None)}
    for n, widths in json.loads(layouts_json).items():
        for g in widths:
            alone = isinstance(g, str) and g.startswith("one:")
            g = int(g[4:]) if alone else g
            mesh = False if alone else mesh_for(None, int(n))  # as `sweep` places them
            layouts[f"{n}/G{g or 'default'}{'/1dev' if alone else ''}"] = (int(n), g or None, mesh)
    engines, hps, states, first = {}, {}, {}, {}
    for name, (n, g, mesh) in layouts.items():
        engines[name] = Engine(cfg, mesh=mesh_for(None, n) if mesh is None else mesh, group_size=g)
        keys, hps[name], _ = agent_inputs(cfg, {}, list(range(n)))
        t0 = time.perf_counter()
        states[name] = engines[name].init(keys, hps[name])
        states[name], m = engines[name].run(states[name], hps[name], updates)
        jax.block_until_ready(m)
        first[name] = time.perf_counter() - t0
    times = {k: [] for k in layouts}
    for _ in range(rounds):
        for name, (n, _, _) in layouts.items():
            t0 = time.perf_counter()
            states[name], m = engines[name].run(states[name], hps[name], updates)
            jax.block_until_ready(m)
            times[name].append(n * updates * cfg.batch_size / (time.perf_counter() - t0))
    one = statistics.median(times["one"])
    print(f"{jax.device_count()} device(s), {len(jax.devices('cpu'))} CPU device(s)")
    for name, (n, _, _) in layouts.items():
        med = statistics.median(times[name])
        width = engines[name].groups.get((Run(updates), n), n)
        print(
            f"{name:14s} width {width:4d} {med:10.0f} steps/s {med / one:6.3f}x one agent  "
            f"compile {engines[name].compile_seconds:.1f}s  first call {first[name]:.1f}s"
        )


if __name__ == "__main__":
    main()
