"""The actor-critic networks.

Every network implements `AbstractActorCritic`: one observation in, ``(logits, value)`` out.
Every layer takes *one* example; callers batch with `jax.vmap` (over envs, minibatch rows
and, in sweeps, agents). `NETWORKS` maps `PPOConfig.network` names to the classes. One job
a module: the shared interface and torso (`_base`), the feedforward networks
(`_feedforward`), the recurrent ones (`_gru`), and the builder (`_build`).
"""

from ._base import ACTIVATIONS as ACTIVATIONS
from ._base import NARROW_INPUT as NARROW_INPUT
from ._base import AbstractActorCritic as AbstractActorCritic
from ._base import _linear as _linear
from ._build import NETWORKS as NETWORKS
from ._build import make_network as make_network
from ._build import network_shapes as network_shapes
from ._feedforward import PerCellActorCritic as PerCellActorCritic
from ._feedforward import SeparateActorCritic as SeparateActorCritic
from ._feedforward import SharedActorCritic as SharedActorCritic
from ._gru import GRU_UNROLL as GRU_UNROLL
from ._gru import AbstractRecurrentActorCritic as AbstractRecurrentActorCritic
from ._gru import GRUActorCritic as GRUActorCritic
from ._gru import is_recurrent as is_recurrent
