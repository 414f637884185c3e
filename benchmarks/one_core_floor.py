"""Why one small agent runs on one CPU core: the measurements behind docs/benchmarks.md.

    python benchmarks/one_core_floor.py [UPDATES]

Prints, in one process (2 CPU devices, as ``import purejaxppo`` sets up on 2 cores):

1. ``learn``'s ms per update of PureJaxRL's CartPole config against the MLP width (8 to 128):
   how much of an update is arithmetic and how much per-kernel overhead;
2. one agent's whole run (compiled first), its wall time and process CPU time / wall time
   (1.0: one core busy);
3. two independent chains of 128×64 matmuls in one program against one chain: whether
   XLA:CPU runs independent operations of one program side by side;
4. one `psum` of the flat parameter vector (9,155 floats) across the 2 CPU devices, per
   call: the price of splitting one agent's minibatch over two cores.
"""

import sys
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from epoch_unroll import CARTPOLE  # PureJaxRL's CartPole config (benchmarks/ is on sys.path)
from jax.sharding import Mesh, PartitionSpec

from purejaxppo import PPOConfig, _ppo
from purejaxppo._distributions import policy_distribution
from purejaxppo._engine import Engine, agent_inputs, mesh_for
from purejaxppo._xla_cpu import compiler_options, unrolled_threefry
from purejaxppo.envs import make_env


def timed(fn, *args, repeats: int = 5) -> tuple[float, float]:
    """(best wall seconds, CPU seconds / wall seconds of that call) of a compiled ``fn``."""
    jax.block_until_ready(fn(*args))
    best = (float("inf"), 0.0)
    for _ in range(repeats):
        cpu0, t0 = time.process_time(), time.perf_counter()
        jax.block_until_ready(fn(*args))
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        best = min(best, (wall, cpu / wall))
    return best


def learn_per_width(updates: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 5e5 is not a multiple of the batch: as PureJaxRL
        base = PPOConfig.from_purejaxrl(CARTPOLE)
    print("1. learn (4 epochs × 4 minibatches of 128 rows), ms per update:")
    for width in (8, 16, 32, 64, 128):
        cfg = base.replace(mlp_widths=(width, width))
        env = make_env(cfg)
        state = jax.jit(lambda k, cfg=cfg, env=env: _ppo.init_state(cfg, env, k))(
            jax.random.PRNGKey(0)
        )
        state, traj, _ = jax.jit(lambda s, cfg=cfg, env=env: _ppo.collect(cfg, env, s))(state)
        rows = cfg.batch_size
        flat = jax.tree.map(lambda x, r=rows: x.reshape(r, *x.shape[2:]), traj)
        flat = flat._replace(final_obs=None, final_hidden=None)
        dist = policy_distribution(cfg, env)
        adv = jnp.linspace(-1.0, 1.0, cfg.batch_size)

        def learns(s, cfg=cfg, flat=flat, dist=dist, adv=adv):
            def body(s, _):
                s, info = _ppo.learn(cfg, s, flat, adv, adv + flat.value, dist)
                return s, info.policy_loss

            return jax.lax.scan(body, s, None, updates)

        with unrolled_threefry():
            program = jax.jit(learns, compiler_options=compiler_options()).lower(state).compile()
        wall, _ = timed(program, state)
        print(f"   width {width:3d}: {wall / updates * 1e3:6.3f} ms")


def whole_run() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = PPOConfig.from_purejaxrl(CARTPOLE)
    engine = Engine(cfg, mesh=mesh_for(None, 1))  # placed as `sweep` places one agent
    keys, hp, _ = agent_inputs(cfg, {}, [0])
    wall, busy = timed(lambda k, h: engine(k, h)[1], keys, hp, repeats=3)
    print(f"2. the whole 1-seed run ({cfg.num_updates} updates): {wall:.2f} s, CPU/wall {busy:.2f}")


def independent_chains(steps: int = 20000) -> None:
    n, h = 128, 64

    def chains(count):
        def body(c, _):
            xs, w = c
            return (tuple(jnp.tanh(x @ w) for x in xs), w), None

        def run(xs, w):
            return jax.lax.scan(body, (xs, w), None, steps)[0][0]

        return jax.jit(run)

    w = jnp.eye(h) * 0.9
    one, _ = timed(chains(1), (jnp.ones((n, h)),), w)
    two, busy = timed(chains(2), (jnp.ones((n, h)), jnp.ones((n, h)) * 0.5), w)
    print(
        f"3. {n}×{h} tanh(x @ w) chains, {steps} steps: one {one:.3f} s, two independent "
        f"{two:.3f} s ({two / one:.2f}×; CPU/wall {busy:.2f})"
    )


def psum_cost(calls: int = 2000) -> None:
    if jax.device_count() < 2:
        print("4. psum: skipped (one device)")
        return
    mesh = Mesh(np.asarray(jax.devices()[:2]), ("d",))

    def body(c, _):
        return jax.lax.pcast(jax.lax.psum(c * 0.5, "d"), "d", to="varying"), None

    def run(x):
        return jax.lax.scan(body, x, None, calls)[0]

    spec = PartitionSpec("d")
    program = jax.jit(jax.shard_map(run, mesh=mesh, in_specs=spec, out_specs=spec))
    wall, _ = timed(program, jnp.ones((2 * 9155,)))
    print(f"4. psum of 9,155 floats across 2 CPU devices: {wall / calls * 1e6:.1f} µs per call")


def main() -> None:
    arg = (sys.argv[1:] or ["100"])[0]
    updates = int(arg) if arg.isdigit() else 0
    if updates < 1:
        sys.exit("UPDATES ≥ 1, e.g. 100.")
    print(f"{jax.device_count()} {jax.default_backend()} device(s), jax {jax.__version__}")
    learn_per_width(updates)
    whole_run()
    independent_chains()
    psum_cost()


if __name__ == "__main__":
    main()
