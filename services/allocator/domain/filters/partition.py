"""PartitionFilter (TensorFusion gpuallocator filter 3, PartitionTemplateFilter, made exact).

For a ``partitioned`` request a GPU passes when it can be partitioned, a template of its model
holds the request, and that template can be placed now (no other isolation mode on the GPU, the
template's count and media-engine limits, a free slot run, its size free): the rules of
:mod:`services.allocator.domain.partition`. For ``soft`` and ``hard`` requests a GPU holding
partitions is removed (partitioned never mixes with other modes on one GPU; ``shared`` needs an
idle GPU, which SharedWholeGPUFilter already checks). A static pass keeps only what cannot change:
support and a template that holds the request.

It runs after ResourceFilter and is not capacity-bound, so the node index's summary (which only
knows the request, a lower bound of the template's size) never attributes its removals to it:
``explain`` counts the same with or without that summary.
"""

from __future__ import annotations

from typing import ClassVar

from services.allocator.domain.framework import OK, UNRESOLVABLE, UNSCHEDULABLE, Context, Status
from services.allocator.domain.model import GpuState
from services.allocator.domain.need import Need
from services.allocator.domain.partition import FITS, broken, chosen, support
from services.partitions.templates import TemplateTable


class PartitionFilter:
    """Partitioned requests: support, template and placement; other modes: no GPU with partitions.

    ``table`` is the MIG template table the Scheduler's profile carries."""

    name: ClassVar[str] = "PartitionFilter"
    capacity_bound: ClassVar[bool] = False
    holds_partitions: ClassVar[Status] = Status(UNSCHEDULABLE, "GPU holds partitions")
    cannot_place: ClassVar[Status] = Status(UNSCHEDULABLE, "the partition cannot be placed now (see the reason)")

    def __init__(self, table: TemplateTable) -> None:
        self.table = table

    def enabled(self, need: Need) -> bool:
        """On for every request but ``shared`` (whose idle-GPU check already excludes partitions)."""
        return not need.shared

    def filter(self, gpu: GpuState, need: Need, ctx: Context) -> Status:
        """:data:`OK`, or why the GPU cannot take ``need``'s partition (or a non-partitioned request)."""
        if not need.partitioned:
            return self.holds_partitions if gpu.partitions and not ctx.static else OK
        family = support(gpu, self.table)
        if isinstance(family, str):
            return Status(UNRESOLVABLE, family)
        option = chosen(need, family, gpu.spec.capacity)
        if isinstance(option, str):
            return Status(UNRESOLVABLE, option)
        return OK if ctx.static or broken(gpu, option) == FITS else self.cannot_place
