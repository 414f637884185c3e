"""purejaxppo: a one-program, vmappable PPO trainer in JAX + Equinox.

The names a researcher uses are here. The rest is in named subpackages: environments in
`purejaxppo.envs`, statistics over seeds in `purejaxppo.stats`, the run directory in
`purejaxppo.rundir`, devices and compiled programs in `purejaxppo.engine`, policies and
their evaluation in `purejaxppo.evaluation`, experiment tracking (W&B, TensorBoard) in
`purejaxppo.tracking`, the command line in `purejaxppo.cli`.
"""

# ruff: noqa: E402  (the CPU device count is set before anything else is imported)
from . import _cpu_devices

_cpu_devices.at_import()  # before any JAX operation: one CPU device per core (see there)

import importlib as _importlib
import warnings as _warnings

from . import engine as engine
from . import envs as envs
from . import evaluation as evaluation
from . import rundir as rundir
from . import stats as stats
from . import tracking  # noqa: F401  (the subpackage `purejaxppo.tracking`, not in __all__)
from ._config import PPOConfig as PPOConfig
from ._evaluate import Policy as Policy
from ._evaluate import evaluate as evaluate
from ._pbt import pbt as pbt
from ._pbt import resume_pbt as resume_pbt
from ._ppo import Metrics as Metrics
from ._ppo import RunnerState as RunnerState
from ._ppo import gae as gae
from ._results import PBTResult as PBTResult
from ._results import SweepResult as SweepResult
from ._sweep import resume_sweep as resume_sweep
from ._sweep import sweep as sweep
from ._sweep import train_with_checkpoints as train_with_checkpoints
from ._train import make_train as make_train
from .rundir import load_policy as load_policy

__version__ = "0.1.0"

__all__ = [
    "Metrics", "PBTResult", "PPOConfig", "Policy", "RunnerState", "SweepResult", "engine",
    "envs", "evaluate", "evaluation", "gae", "load_policy", "make_train", "pbt", "resume_pbt",
    "resume_sweep", "rundir", "stats", "sweep", "train_with_checkpoints",
]  # fmt: skip

#: Names the top level had before the subpackages (0.1.0 of 2026-12): still importable from
#: here, with a warning naming their home.
_MOVED = {
    "CheckpointError": "rundir",
    "read_run": "rundir",
    "write_run": "rundir",
    "Progress": "engine",
    "agent_mesh": "engine",
    "default_group_size": "engine",
    "enable_compilation_cache": "engine",
    "EvalResult": "evaluation",
    "policy_of": "evaluation",
}


def __getattr__(name: str):
    if name in _MOVED:
        home = f"purejaxppo.{_MOVED[name]}"
        _warnings.warn(
            f"purejaxppo.{name} moved to {home}.{name}; import it from there.",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(_importlib.import_module(home), name)
    raise AttributeError(f"module 'purejaxppo' has no attribute {name!r}")
