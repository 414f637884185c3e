"""Where agents live: the ``"agents"`` mesh axis, padding the agent axis to the devices and
placing each device's shard, and what crosses hosts (gathering, any process's flag).

`Engine` places every program's inputs here; nothing here knows what an agent computes.
Inputs are placed with `jax.make_array_from_callback`, which also works when the mesh spans
several hosts after `jax.distributed.initialize()`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

AXIS = "agents"


def agent_mesh(devices: Any = None) -> Mesh:
    """A 1-D mesh named ``"agents"`` over ``devices`` (default: every device of every host)."""
    devices = jax.devices() if devices is None else list(devices)
    return Mesh(np.asarray(devices), (AXIS,))


def mesh_for(mesh: Mesh | None | bool, num_agents: int) -> Mesh | None | bool:
    """What ``mesh`` (as `Engine` takes it) should be for ``num_agents`` agents.

    The default (None) shards over every device, except in a one-process run with fewer
    agents than devices: one agent runs unsharded (a padded copy on a second CPU device only
    slowed it), and a few agents take as many devices as there are agents, not padding.
    """
    if mesh is not None or jax.process_count() > 1 or num_agents >= jax.device_count():
        return mesh
    return False if num_agents == 1 else agent_mesh(jax.devices()[:num_agents])


def place(tree: Any, total: int, mesh: Mesh | None) -> Any:
    """``tree``'s leaves (leading axis: agent) padded to ``total`` agents by repeating agent 0
    (valid, finite, ignored) and sharded over ``mesh``'s agent axis (a no-op for an array
    already so)."""
    sharding = None if mesh is None else NamedSharding(mesh, PartitionSpec(AXIS))

    def one(x):
        if isinstance(x, jax.Array) and x.shape[:1] == (total,):
            if sharding is None or x.sharding.is_equivalent_to(sharding, x.ndim):
                return x
        host = np.asarray(gather(x))
        if host.shape[0] != total:
            host = np.concatenate([host, np.repeat(host[:1], total - host.shape[0], 0)])
        if sharding is None:
            return jnp.asarray(host)
        return jax.make_array_from_callback(host.shape, sharding, lambda i: host[i])

    return jax.tree.map(one, tree)


def replicate(tree: Any, mesh: Mesh | None) -> Any:
    """Every device of ``mesh`` holds the whole of ``tree`` (also across hosts)."""
    if mesh is None:
        return jax.tree.map(jnp.asarray, tree)
    sharding = NamedSharding(mesh, PartitionSpec())

    def one(x):
        host = np.asarray(gather(x))
        return jax.make_array_from_callback(host.shape, sharding, lambda i: host[i])

    return jax.tree.map(one, tree)


def any_process(flag: bool) -> bool:
    """Whether ``flag`` is true on any process (every process must call it: a collective).

    A decision that changes the program sequence — stop at this chunk — must be the same on
    every host, or the others wait forever in the next collective; a signal may reach one
    host a chunk before another.
    """
    if jax.process_count() == 1:
        return bool(flag)
    from jax.experimental import multihost_utils

    return bool(np.any(multihost_utils.process_allgather(np.asarray(bool(flag)))))


def gather(x):
    """The whole array on this host (a no-op unless the mesh spans several hosts)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        from jax.experimental import multihost_utils

        return multihost_utils.process_allgather(x, tiled=True)
    return x
