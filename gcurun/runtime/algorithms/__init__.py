"""The collective algorithms, written once over :class:`gcurun.runtime.api.Transport`.

Every function takes flat, C-contiguous numpy arrays and moves raw bytes; nothing is
pickled. They know nothing of tensor names or validation: the engine negotiates first
and calls them only when every rank agreed on the shapes. Allreduce has one routine,
:meth:`Reducer.allreduce`, for fused batches and single tensors alike.
"""

from gcurun.runtime.algorithms.alltoall import pairwise_alltoall
from gcurun.runtime.algorithms.broadcast import broadcast
from gcurun.runtime.algorithms.gather import bruck_allgather, gather_allreduce, reduce_blocks
from gcurun.runtime.algorithms.levels import (
    ASSUMED_COSTS,
    HostLayout,
    LinkCosts,
    Subgroup,
    TwoLevels,
    flat_seconds,
    two_level_seconds,
    use_two_levels,
)
from gcurun.runtime.algorithms.levels import Mode as TwoLevelMode
from gcurun.runtime.algorithms.pieces import Finish, Part, Pieces
from gcurun.runtime.algorithms.reduction import GATHER_REDUCE_BYTES, Reducer, Scratch
from gcurun.runtime.algorithms.ring import (
    allgather,
    reduce_scatter,
    ring_allgather,
    ring_reduce_scatter,
)
from gcurun.runtime.algorithms.segments import Segment, even_counts, pair_halves, to_segments

__all__ = ["ASSUMED_COSTS", "GATHER_REDUCE_BYTES", "Finish", "HostLayout", "LinkCosts", "Part",
           "Pieces", "Reducer", "Scratch", "Segment", "Subgroup", "TwoLevelMode", "TwoLevels",
           "allgather", "broadcast", "bruck_allgather", "even_counts", "flat_seconds",
           "gather_allreduce", "pair_halves", "pairwise_alltoall", "reduce_blocks",
           "reduce_scatter", "ring_allgather", "ring_reduce_scatter", "to_segments",
           "two_level_seconds", "use_two_levels"]
