"""Why a partitioned request waits or can never fit, in words: the template chosen per GPU family
and why the others were not, then what blocks the chosen template on each GPU.

Appended to the reason of AllocationQueued / AllocationRejected (TensorFusion returns only
"no partition template can satisfy request" or one GPU's placement error; gpuledger names the
template, the waste of each alternative and the blocking rule per GPU). Pure and deterministic:
pool nodes in name order, GPUs in node order.
"""

from __future__ import annotations

from events.values import AllocationSpec, Resources
from services.allocator.domain.need import Need
from services.allocator.domain.partition import Option, blocked, chosen, options, support
from services.allocator.domain.state import ClusterState
from services.partitions.templates import MigFamily, TemplateTable

MAX_GPUS_NAMED = 4
"""GPUs named per reason list; the rest are counted."""


def _template_line(family: MigFamily, capacity: Resources, need: Need) -> str:
    best = chosen(need, family, capacity)
    if isinstance(best, str):
        return f"{family.family}: {best}"
    if need.template:
        return f"{family.family}: template {best.profile.name} (named)"
    others = [o.why for o in options(family, capacity, need) if o.profile is not best.profile]
    return f"{family.family}: template {best.profile.name} (least waste {best.score:.3f}; others: {', '.join(others)})"


def _named(items: list[str]) -> str:
    head = "; ".join(items[:MAX_GPUS_NAMED])
    more = len(items) - MAX_GPUS_NAMED
    return head + (f"; and {more} more" if more > 0 else "")


def describe(state: ClusterState, spec: AllocationSpec, need: Need, table: TemplateTable) -> str:
    """``partition: <family>: template <name> (<why>; others: ...) | GPU <g>: <blocking rule> ...``
    over the GPUs of ``spec``'s pool."""
    templates: dict[tuple[str, Resources], str] = {}
    blocks: list[str] = []
    unsupported: list[str] = []
    for node in sorted(state.pool_nodes.get(spec.pool, ())):
        for name in state.nodes[node].gpus:
            gpu = state.gpus[name]
            family = support(gpu, table)
            if isinstance(family, str):
                unsupported.append(family)
                continue
            capacity = gpu.spec.capacity
            key = (family.family, capacity)
            if key not in templates:
                templates[key] = _template_line(family, capacity, need)
            option = chosen(need, family, capacity)
            why = blocked(gpu, family, option) if isinstance(option, Option) else None
            if why is not None:
                blocks.append(f"GPU {name}: {why}")
    parts = list(templates.values())
    if blocks:
        parts.append(_named(blocks))
    if unsupported:
        parts.append(f"{len(unsupported)} GPU(s) cannot be partitioned ({unsupported[0]})")
    return "partition: " + (" | ".join(parts) or "no GPU in the pool")
