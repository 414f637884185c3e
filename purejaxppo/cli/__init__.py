"""Train PPO agents from the command line: purejaxppo train | sweep | pbt | eval | bench.

Every `PPOConfig` field is a flag (``--lr 1e-3``, ``--maze easy``, ``--mlp-widths 64 64``),
documented in ``--help`` from the field's docstring; ``--config FILE.yaml|json`` sets any of
them from a file (flags given on the command line win). ``train`` and ``sweep`` write a run
directory (see `purejaxppo.rundir`), ``pbt`` a PBT run directory (`purejaxppo.rundir`);
``eval RUN_DIR`` evaluates it; ``bench`` prints a table
of compile time and steps/s at several agent counts (``--suite scaling``: many agents on one
device, any backend).
"""

from __future__ import annotations

import contextlib
import re
import sys
from typing import Annotated, Union

import tyro

from .._cpu_devices import requested_cpu_devices
from ._bench import bench
from ._eval import evaluate_run
from ._files import file_defaults
from ._flags import BenchCmd, EvalCmd, PBTCmd, SweepCmd, TrainCmd
from ._pbt_cmd import train_pbt
from ._train import train


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        requested_cpu_devices()  # read at import; refused here, before anything else
        defaults = file_defaults(argv)
    except (OSError, ValueError) as e:
        print(f"purejaxppo: {e}", file=sys.stderr)
        return 2
    Command = Union[  # noqa: UP007 - tyro needs the Union of annotated subcommands
        Annotated[TrainCmd, tyro.conf.subcommand("train", default=TrainCmd(**defaults))],
        Annotated[SweepCmd, tyro.conf.subcommand("sweep", default=SweepCmd(**defaults))],
        Annotated[PBTCmd, tyro.conf.subcommand("pbt", default=PBTCmd(**defaults))],
        Annotated[EvalCmd, tyro.conf.subcommand("eval")],
        Annotated[BenchCmd, tyro.conf.subcommand("bench", default=BenchCmd(**defaults))],
    ]
    cmd = tyro.cli(Command, args=argv, prog="purejaxppo", description=__doc__.split("\n")[0])
    with _one_line_warnings():
        try:
            if isinstance(cmd, EvalCmd):
                return evaluate_run(cmd)
            if isinstance(cmd, BenchCmd):
                return bench(cmd)
            if isinstance(cmd, PBTCmd):
                return train_pbt(cmd, argv)
            return train(cmd, argv)
        except (ValueError, TypeError, FileNotFoundError) as e:
            print(f"purejaxppo {argv[0]}: {cli_words(str(e))}", file=sys.stderr)
            return 2


def cli_words(message: str) -> str:
    """A config's refusal in the command line's words: ``PPOConfig.num_envs=3 is invalid``
    becomes ``--num-envs 3 is invalid``, the flag the user typed rather than the field."""
    return re.sub(
        r"PPOConfig\.(\w+)=(.*?) is ",
        lambda m: f"--{m[1].replace('_', '-')} {m[2]} is ",
        message,
    )


@contextlib.contextmanager
def _one_line_warnings():
    """Our own warnings (a damaged checkpoint skipped, a stale lock) as one line each."""
    import warnings

    from ..rundir._lock import RunDirWarning

    old = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, RunDirWarning):
            print(f"purejaxppo: warning: {message}", file=sys.stderr, flush=True)
        else:
            old(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = old
