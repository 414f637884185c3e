"""Command line: ``purejaxppo train`` trains one agent on a config (default: the medium maze).

Every scalar `PPOConfig` field is a flag (``--lr 1e-3``, ``--maze easy``); ``--help`` lists them.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time

from ._config import PPOConfig


def _field_flags(parser: argparse.ArgumentParser) -> list[str]:
    names = []
    for f in dataclasses.fields(PPOConfig):
        default = f.default
        kind = type(default)
        if f.name == "max_grad_norm":
            kind = float
        elif f.name == "maze":
            kind = str
        elif kind not in (int, float, str, bool):
            continue  # tuples (network widths, layouts) are API-only for now
        doc = _field_doc(f.name)
        flag = "--" + f.name.replace("_", "-")
        if kind is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=None, help=doc)
        else:
            parser.add_argument(flag, type=kind, default=None, help=f"{doc} (default: {default})")
        names.append(f.name)
    return names


def _field_doc(name: str) -> str:
    import ast
    import inspect

    # Field docstrings are the string literal after each field in the class body.
    src = inspect.getsource(PPOConfig)
    body = ast.parse(src).body[0].body
    for a, b in zip(body, body[1:], strict=False):
        if isinstance(a, ast.AnnAssign) and getattr(a.target, "id", None) == name:
            if isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant):
                return " ".join(str(b.value.value).split())
    return ""


def _train(args, names) -> int:
    import jax

    from ._ppo import make_train

    given = {n: getattr(args, n) for n in names if getattr(args, n) is not None}
    try:
        if args.resume:
            from ._checkpoint import read_run_config

            if given:
                raise ValueError(
                    f"--resume continues a run with its own config.json; drop {sorted(given)}."
                )
            cfg, args.seed = read_run_config(args.resume)
        else:
            cfg = PPOConfig(**given)
    except (ValueError, TypeError) as e:
        print(f"purejaxppo train: {e}", file=sys.stderr)
        return 2

    every = max(1, cfg.num_updates // args.print_every_frac) if cfg.num_updates > 1 else 1
    start = {"t": None}

    def progress(update, m):
        update = int(update)
        if start["t"] is None:
            start["t"] = time.perf_counter()
        if update % every and update != cfg.num_updates:
            return
        steps = update * cfg.batch_size
        ret = float(m.episode_return)
        ret_s = "   n/a" if math.isnan(ret) else f"{ret:6.3f}"
        print(
            f"update {update:5d}/{cfg.num_updates}  steps {steps:>10,}  return {ret_s}  "
            f"episodes {int(m.episodes):5d}  entropy {float(m.entropy):.3f}",
            flush=True,
        )

    maze = cfg.maze_spec if isinstance(cfg.maze_spec, str) else "custom"
    print(
        f"purejaxppo: {cfg.env} maze={maze}"
        f" | {cfg.total_timesteps:,} steps = {cfg.num_updates} updates × {cfg.num_envs} envs × "
        f"{cfg.num_steps} steps | seed {args.seed} | backend {jax.default_backend()}",
        flush=True,
    )
    if args.run_dir or args.resume:
        return _train_checkpointed(args, cfg, progress)
    train = make_train(cfg, progress=progress)
    key = jax.random.PRNGKey(args.seed)
    t0 = time.perf_counter()
    compiled = train.compile(key)
    t1 = time.perf_counter()
    print(f"compiled in {t1 - t0:.1f} s; training...", flush=True)
    state, metrics = compiled(key)
    jax.block_until_ready(metrics)
    t2 = time.perf_counter()
    _summary(cfg, metrics, t0, t1, t2)
    return 0


def _train_checkpointed(args, cfg, progress) -> int:
    import signal

    from ._checkpoint import CheckpointError, train_with_checkpoints

    run_dir = args.resume or args.run_dir
    stop = {"signal": None}

    def handler(signum, frame):
        stop["signal"] = signal.Signals(signum).name
        print(f"\n{stop['signal']}: stopping at the next checkpoint...", flush=True)

    old = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    t0 = time.perf_counter()
    try:
        state, metrics, finished = train_with_checkpoints(
            cfg,
            run_dir,
            seed=args.seed,
            checkpoint_every=args.checkpoint_every,
            resume=bool(args.resume),
            should_stop=lambda: stop["signal"] is not None,
            progress=progress,
        )
    except CheckpointError as e:
        print(f"purejaxppo train: {e}", file=sys.stderr)
        return 2
    finally:
        for s, h in old.items():
            signal.signal(s, h)
    t2 = time.perf_counter()
    if not finished:
        print(
            f"stopped after update {int(state.update)} with a checkpoint in {run_dir}.\n"
            f"resume with: purejaxppo train --resume {run_dir}",
            flush=True,
        )
        return 130 if stop["signal"] == "SIGINT" else 143
    print(f"checkpoints in {run_dir}")
    _summary(cfg, metrics, t0, None, t2)
    return 0


def _summary(cfg, metrics, t0, t1, t2) -> None:
    import numpy as np

    ret = np.asarray(metrics.episode_return)
    last = ret[-min(10, len(ret)) :]
    print("\nsummary")
    print(f"  final return (last update)        {ret[-1]:.4f}")
    print(f"  mean return (last {len(last):2d} updates)     {np.nanmean(last):.4f}")
    print(f"  env steps                         {cfg.total_timesteps:,}")
    if t1 is not None:
        run_s = t2 - t1
        print(f"  steps/s (run only)                {cfg.total_timesteps / run_s:,.0f}")
        print(f"  compile s                         {t1 - t0:.2f}")
        print(f"  run s                             {run_s:.2f}")
    print(f"  total s                           {t2 - t0:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="purejaxppo", description="One-program PPO in JAX + Equinox."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    tr = sub.add_parser(
        "train",
        help="train one agent (default: the seed's medium maze, 819,200 steps)",
        description="Train one PPO agent. Defaults are the seed system's hyperparameters.",
    )
    names = _field_flags(tr)
    tr.add_argument("--seed", type=int, default=0, help="PRNG seed (default: 0)")
    tr.add_argument(
        "--run-dir",
        default=None,
        help="train in chunks and write config.json + atomic checkpoints here",
    )
    tr.add_argument(
        "--checkpoint-every",
        type=int,
        default=10,
        help="updates per chunk/checkpoint with --run-dir (default: 10)",
    )
    tr.add_argument(
        "--resume", default=None, metavar="RUN_DIR", help="continue a run from its last checkpoint"
    )
    tr.add_argument(
        "--print-every-frac",
        type=int,
        default=20,
        help="progress lines per run, roughly (default: 20)",
    )
    args = parser.parse_args(argv)
    if args.command == "train":
        return _train(args, names)
    return 2  # pragma: no cover - argparse rejects unknown commands


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
