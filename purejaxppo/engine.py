"""Where and how agents run: the one `Engine` under `make_train`, `sweep` and `pbt`.

Most users never touch it; these names are for placing agents on devices (`agent_mesh`,
`mesh_for`), choosing how many are vmapped together (`default_group_size`), following a run
from inside the program (`Progress`, delivered `updates_per_callback` updates at a time) and
keeping compiled programs between processes (`enable_compilation_cache`). See docs/guide.md.
"""

from ._cache import enable_compilation_cache as enable_compilation_cache
from ._engine import Engine as Engine
from ._engine import engine_for as engine_for
from ._groups import default_group_size as default_group_size
from ._placement import agent_mesh as agent_mesh
from ._placement import mesh_for as mesh_for
from ._progress import Progress as Progress
from ._progress import ProgressFn as ProgressFn
from ._progress import updates_per_callback as updates_per_callback
