"""The compiled programs a process keeps, across every engine: the least recently used is
dropped past `MAX_PROGRAMS` (and compiled again if it is needed again)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

#: Compiled programs kept across all engines. An XLA:CPU program holds ~600 memory mappings
#: (3 per kernel) until it is freed, and Linux allows 65,530 per process
#: (``vm.max_map_count``): a process that kept every program crashed inside XLA after about
#: a hundred.
MAX_PROGRAMS = 24
_RECENT: OrderedDict = OrderedDict()  # (id(engine), cache key) -> engine


def keep_alive(engine: Any, cache_key: Any) -> None:
    """Mark ``engine``'s program ``cache_key`` (in its ``_compiled``) as just used; free the
    oldest past the limit."""
    entry = (id(engine), cache_key)  # the engine is a value here, so its id stays its own
    _RECENT[entry] = engine
    _RECENT.move_to_end(entry)
    while len(_RECENT) > MAX_PROGRAMS:
        (_, old_key), old_engine = _RECENT.popitem(last=False)
        old_engine._compiled.pop(old_key, None)
