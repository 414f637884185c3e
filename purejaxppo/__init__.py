"""purejaxppo: a one-program, vmappable PPO trainer in JAX + Equinox."""

from ._checkpoint import CheckpointError as CheckpointError
from ._config import JUMANJI_ENVS as JUMANJI_ENVS
from ._config import SUPPORTED_ENVS as SUPPORTED_ENVS
from ._config import PPOConfig as PPOConfig
from ._engine import Engine as Engine
from ._engine import Progress as Progress
from ._engine import agent_mesh as agent_mesh
from ._envs import Env as Env
from ._envs import EnvStep as EnvStep
from ._envs import JumanjiMaze as JumanjiMaze
from ._envs import TimeInput as TimeInput
from ._envs import make_env as make_env
from ._evaluate import EvalResult as EvalResult
from ._evaluate import Policy as Policy
from ._evaluate import evaluate as evaluate
from ._evaluate import policy_of as policy_of
from ._jumanji import ENCODERS as ENCODERS
from ._jumanji import ActionLayout as ActionLayout
from ._jumanji import JumanjiEnv as JumanjiEnv
from ._jumanji import action_layout as action_layout
from ._jumanji import flatten_observation as flatten_observation
from ._mazes import EASY as EASY
from ._mazes import MEDIUM as MEDIUM
from ._mazes import MazeLayout as MazeLayout
from ._mazes import parse_layout as parse_layout
from ._networks import ActorCritic as ActorCritic
from ._ppo import Metrics as Metrics
from ._ppo import RunnerState as RunnerState
from ._ppo import Transition as Transition
from ._ppo import gae as gae
from ._rundir import load_params as load_params
from ._rundir import load_policy as load_policy
from ._rundir import read_run as read_run
from ._rundir import write_run as write_run
from ._rundir import write_tensorboard as write_tensorboard
from ._stats import bootstrap_ci as bootstrap_ci
from ._stats import iqm as iqm
from ._sweep import Agent as Agent
from ._sweep import SweepResult as SweepResult
from ._sweep import resume_sweep as resume_sweep
from ._sweep import sweep as sweep
from ._sweep import train_with_checkpoints as train_with_checkpoints
from ._train import Train as Train
from ._train import make_train as make_train

__version__ = "0.1.0"
