"""purejaxppo: a one-program, vmappable PPO trainer in JAX + Equinox.

The names a researcher uses are here; environments are in `purejaxppo.envs`, statistics over
seeds in `purejaxppo.stats`, the command line in `purejaxppo.cli`.
"""

# ruff: noqa: E402  (the CPU device count is set before anything else is imported)
from . import _cpu_devices

_cpu_devices.at_import()  # before any JAX operation: one CPU device per core (see there)

from . import envs as envs
from . import stats as stats
from ._cache import enable_compilation_cache as enable_compilation_cache
from ._checkpoint import CheckpointError as CheckpointError
from ._config import PPOConfig as PPOConfig
from ._engine import Progress as Progress
from ._engine import agent_mesh as agent_mesh
from ._engine import default_group_size as default_group_size
from ._evaluate import EvalResult as EvalResult
from ._evaluate import Policy as Policy
from ._evaluate import evaluate as evaluate
from ._evaluate import policy_of as policy_of
from ._pbt import PBTResult as PBTResult
from ._pbt import pbt as pbt
from ._pbt import resume_pbt as resume_pbt
from ._ppo import Metrics as Metrics
from ._ppo import RunnerState as RunnerState
from ._ppo import gae as gae
from ._rundir import load_policy as load_policy
from ._rundir import read_run as read_run
from ._rundir import write_run as write_run
from ._sweep import SweepResult as SweepResult
from ._sweep import resume_sweep as resume_sweep
from ._sweep import sweep as sweep
from ._sweep import train_with_checkpoints as train_with_checkpoints
from ._train import make_train as make_train

__version__ = "0.1.0"
