"""Experiment tracking: every agent's metrics, live, in Weights & Biases or TensorBoard.

    from purejaxppo import sweep
    from purejaxppo.tracking import TensorBoard, WandB

    sweep(cfg, seeds=16, lr=[1e-4, 3e-4], tracker=WandB(project="my-project"))

A tracker is a small frozen options object (`WandB`, `TensorBoard`, or your own `Tracker`).
`make_train`, `sweep`, `pbt` and the CLI (``--wandb PROJECT``, ``--tensorboard``) take one
or several. Every agent's metrics reach it through the one progress callback the compiled
program already makes per update (`Progress.agents`); a background thread writes them, so
the program never waits on a logging call, and a logging failure is a warning, never a
stopped or changed run. docs/guide.md "Experiment tracking" says what appears where.
"""

from ._base import Finished as Finished
from ._base import Session as Session
from ._base import TrackedAgent as TrackedAgent
from ._base import TrackedRun as TrackedRun
from ._base import Tracker as Tracker
from ._base import TrackingWarning as TrackingWarning
from ._tensorboard import TensorBoard as TensorBoard
from ._wandb import WandB as WandB
