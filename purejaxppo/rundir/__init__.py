"""Everything on disk: the run directory a sweep, a PBT run or the CLI leaves behind.

One home for the checkpoint format (`_format`), the one-writer lock (`_lock`), the writers
(`write_run`, `write_pbt_run`, `write_tensorboard`) and the readers (`describe`, `read_run`,
`load_agents`, `load_policy`). The trainers (`sweep`, `pbt`) write through it; the CLI reads
through it and never parses the JSON files itself.

    >>> info = purejaxppo.rundir.describe("runs/cartpole")
    >>> info.kind, info.finished, info.done, info.total
    ('sweep', True, 50, 50)
"""

from ._format import CheckpointError as CheckpointError
from ._lock import RunDirError as RunDirError
from ._lock import RunDirWarning as RunDirWarning
from ._pbt_files import write_pbt_run as write_pbt_run
from ._read import RunInfo as RunInfo
from ._read import describe as describe
from ._read import load_agents as load_agents
from ._read import load_policy as load_policy
from ._read import read_run as read_run
from ._write import write_run as write_run
from ._write import write_tensorboard as write_tensorboard
