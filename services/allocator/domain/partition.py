"""Partitioned (MIG) allocations: which GPUs can take one, which template, which slots, what it costs.

A request with isolation ``partitioned`` takes, on each of its GPUs, one hardware partition of a
MIG template of the shipped table (:mod:`services.partitions.templates`). The rules (TensorFusion
internal/gpuallocator/partitioned_scheduling.go ``MatchPartitionTemplate``, partition_strategy.go
``NVIDIAMIGStrategy``, filter/partition_template_filter.go; differences in docs/compatibility.md):

* support: the GPU's model has a template table and its isolation capabilities are unknown
  (empty) or include ``partitioned``;
* no mixing: a partitioned request never goes to a GPU holding soft, hard or shared allocations,
  and a GPU holding partitions takes no other request (:mod:`...filters.partition`);
* template: the named one (``spec.partition_template``; TensorFusion's aliases accepted) when it
  holds the request, else the one with the least waste ``0.6 × (template TFLOPS − request) /
  max(request, 1 TFLOPS) + 0.4 × (template bytes − request) / max(request, 1 byte)``, compared
  exactly (integers); ties go to the template with fewer slots, then to the smaller name;
* placement: fewer than ``max_instances`` of the template on the GPU, at most one ``+me``
  partition per GPU, a run of free slots at one of the template's starts (the highest free one,
  which keeps the low starts that only large templates may use), and the template's size free;
* charge: the template's size (:func:`services.partitions.templates.charge`), never the request;
  quota counts that same amount as request and as limit.

Pure functions of records and the (immutable) template table.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from events.bounds import MAX_PARTITION_SLOTS
from events.quantity import format_bytes, tflops_text
from events.values import AllocationSpec, Partition, QuotaSpec, Resources
from services.allocator.domain.model import GpuState, QuotaUsage
from services.allocator.domain.need import Need
from services.allocator.domain.placement import Blocked, Grant
from services.allocator.domain.quota import QuotaBlock, check_single, check_totals, usage_of
from services.partitions.templates import MigFamily, MigProfile, TemplateTable, charge, free_starts

TFLOPS_WEIGHT, VRAM_WEIGHT = 3, 2
"""TensorFusion's 0.6 / 0.4 waste weights, as integers over 5 (PartitionMatchingComputingWeight)."""

ONE_TFLOPS = 1000
"""The waste divisor's floor in milli-TFLOPS (TensorFusion: ``max(requestTflops, 1.0)``)."""


class Option(NamedTuple):
    """One template judged for one request on one GPU: its charge, exact waste key (lower is
    better; None when it cannot hold the request) and the waste as TensorFusion's float score."""

    profile: MigProfile
    charge: Resources
    key: int | None
    score: float
    why: str


def wanted(need: Need, capacity: Resources) -> tuple[int, int]:
    """The per-GPU request on a GPU of ``capacity``: (milli-TFLOPS, percent converted; bytes)."""
    return (need.tflops_on(capacity.milli_tflops) if need.percent else need.tflops), need.vram


def support(gpu: GpuState, table: TemplateTable) -> MigFamily | str:
    """The GPU's template family, or why it cannot be partitioned."""
    caps = gpu.spec.isolation_capabilities
    if caps and "partitioned" not in caps:
        return f"GPU {gpu.spec.name} does not list partitioned in its isolation capabilities"
    family = table.family_of(gpu.spec.model)
    if family is None:
        return f"model {gpu.spec.model or '(unknown)'} has no MIG template table"
    return family



def _vram_text(value: int) -> str:
    """Bytes as a quantity, in decimal GB when whole (templates are sized in GB: 1g.10gb = 10G)."""
    return f"{value // 10**9}G" if value and value % 10**9 == 0 else format_bytes(value)

def judge(family: MigFamily, profile: MigProfile, capacity: Resources, need: Need) -> Option:
    """``profile`` against the request on a GPU of ``family`` with ``capacity``."""
    size = charge(family, profile, capacity)
    tflops, vram = wanted(need, capacity)
    if size.milli_tflops < tflops:
        too_small = f"{tflops_text(size.milli_tflops)} < {tflops_text(tflops)} asked"
        return Option(profile, size, None, 0.0, f"{profile.name}: {too_small}")
    if size.vram_bytes < vram:
        too_small = f"{_vram_text(size.vram_bytes)} < {_vram_text(vram)} VRAM asked"
        return Option(profile, size, None, 0.0, f"{profile.name}: {too_small}")
    t_floor, v_floor = max(tflops, ONE_TFLOPS), max(vram, 1)
    key = TFLOPS_WEIGHT * (size.milli_tflops - tflops) * v_floor + VRAM_WEIGHT * (size.vram_bytes - vram) * t_floor
    score = key / (5 * t_floor * v_floor)
    return Option(profile, size, key, score, f"{profile.name}: waste {score:.3f}")


def options(family: MigFamily, capacity: Resources, need: Need) -> list[Option]:
    """Every template of ``family`` judged, best first (those that cannot hold the request last)."""
    judged = [judge(family, p, capacity, need) for p in family.profiles]
    return sorted(judged, key=lambda o: (o.key is None, o.key or 0, o.profile.memory_slices, o.profile.name))


def choose(family: MigFamily, capacity: Resources, need: Need) -> Option | str:
    """The template for ``need`` on a GPU of ``family`` with ``capacity``, or why none can hold it
    (a static answer: it depends on the request and the GPU's model and capacity only)."""
    if need.template:
        profile = family.profile(need.template)
        if profile is None:
            return f"{family.family} has no template {need.template!r}"
        named = judge(family, profile, capacity, need)
        return named if named.key is not None else f"named template too small: {named.why}"
    best = options(family, capacity, need)[0]
    return best if best.key is not None else f"no template of {family.family} holds the request"


def start_for(profile: MigProfile, held: Iterable[Partition]) -> int | None:
    """The highest allowed start of ``profile`` whose slot run is free next to ``held``, or None."""
    return max(free_starts(profile, [(p.start, p.end) for p in held]), default=None)


FITS, MIXED, TOO_FULL, AT_LIMIT, MEDIA, NO_SLOT = range(6)
"""What :func:`broken` answers: it can be placed, or the first rule (in this order) it breaks."""


def broken(gpu: GpuState, option: Option) -> int:
    """:data:`FITS`, or the first placement rule ``option`` breaks on ``gpu`` now: another isolation
    mode on the GPU, too little free TFLOPS/VRAM for the template, the template's instance limit,
    the one ``+me`` partition per GPU, no free slot run at an allowed start (cheapest first)."""
    held = gpu.partitions
    if len(gpu.charges) != len(held):
        return MIXED
    size = option.charge
    if gpu.available_milli_tflops < size.milli_tflops or gpu.available_vram_bytes < size.vram_bytes:
        return TOO_FULL
    if not held:
        return FITS
    profile = option.profile
    if sum(1 for p in held.values() if p.template == profile.name) >= profile.max_instances:
        return AT_LIMIT
    if profile.name.endswith("+me") and any(p.template.endswith("+me") for p in held.values()):
        return MEDIA
    return NO_SLOT if start_for(profile, held.values()) is None else FITS


def blocked(gpu: GpuState, family: MigFamily, option: Option) -> str | None:
    """Why ``option`` cannot be placed on ``gpu`` (of ``family``) now, in words (:func:`broken`);
    None when it can."""
    rule, profile, held = broken(gpu, option), option.profile, gpu.partitions.values()
    if rule == FITS:
        return None
    if rule == MIXED:
        return "GPU holds allocations of another isolation mode"
    if rule == TOO_FULL:
        return f"too little free TFLOPS or VRAM for {profile.name}"
    if rule == AT_LIMIT:
        same = sum(1 for p in held if p.template == profile.name)
        return f"{profile.name} at its limit {same}/{profile.max_instances}"
    if rule == MEDIA:
        return "media engines held by another +me partition"
    free = [s for s in range(family.memory_slices) if not any(p.start <= s < p.end for p in held)]
    return (f"no free run of {profile.memory_slices} slot(s) for {profile.name} at starts "
            f"{list(profile.starts)} (free slots {free})")


def chosen(need: Need, family: MigFamily, capacity: Resources) -> Option | str:
    """:func:`choose`, memoised on the request's ``need`` per family and capacity (a pure function
    of the three; a Scheduler keeps one Need per request shape)."""
    key = (family.family, capacity.milli_tflops, capacity.vram_bytes)
    memo = need.partition_memo
    found = memo.get(key)
    if found is None:
        found = memo[key] = choose(family, capacity, need)
    return found  # type: ignore[return-value]


class OutOfContract(ValueError):
    """A placement whose event would break the message contract (``field``/``value`` name it): the
    template table holds a value the contract's bounds refuse. ``decide`` answers the intent with
    IntentRejected instead of appending an event that could not be replayed."""

    def __init__(self, message: str, *, field: str, value: str) -> None:
        super().__init__(message)
        self.field, self.value = field, value


def place(gpu: GpuState, need: Need, table: TemplateTable) -> tuple[Resources, Partition]:
    """The charge and partition of ``need`` on ``gpu``, which the partition filter admitted.

    Raises ValueError when it cannot be placed (the filter and this disagree: a bug), OutOfContract
    when the template's profile id is outside the contract's bound."""
    family = support(gpu, table)
    if isinstance(family, str):
        raise ValueError(family)
    option = chosen(need, family, gpu.spec.capacity)
    why = option if isinstance(option, str) else blocked(gpu, family, option)
    if why is not None or isinstance(option, str):
        raise ValueError(f"partition cannot be placed on GPU {gpu.spec.name}: {why}")
    start = start_for(option.profile, gpu.partitions.values())
    assert start is not None
    profile = option.profile
    if not 0 <= profile.nvml_profile_id <= MAX_PARTITION_SLOTS:  # the event could never be read back
        raise OutOfContract(f"template {profile.name} has nvml_profile_id {profile.nvml_profile_id}, above the "
                            f"event contract's bound of {MAX_PARTITION_SLOTS} for Partition.profile_id",
                            field="profile_id", value=str(profile.nvml_profile_id))
    return option.charge, Partition(template=profile.name, profile_id=profile.nvml_profile_id, start=start,
                                    end=start + profile.memory_slices)


def usage(charges: Iterable[Resources]) -> QuotaUsage:
    """Quota usage of a partitioned allocation: its template sizes, as request and as limit, one worker."""
    amounts = list(charges)
    tflops = sum(c.milli_tflops for c in amounts)
    vram = sum(c.vram_bytes for c in amounts)
    return usage_of(request_tflops=tflops, request_vram=vram, limit_tflops=tflops, limit_vram=vram)


def lower_bound(spec: AllocationSpec) -> QuotaUsage:
    """Usage known before placement: at least the request on each GPU (templates hold it)."""
    n = spec.gpu_count
    tflops, vram = spec.request.milli_tflops * n, spec.request.vram_bytes * n
    return usage_of(request_tflops=tflops, request_vram=vram, limit_tflops=tflops, limit_vram=vram)


def quota_block(quota: QuotaSpec, spec: AllocationSpec, charges: Iterable[Resources], used: QuotaUsage,
                add: QuotaUsage) -> QuotaBlock | None:
    """Per-workload caps on each template size (as request and limit), then namespace totals."""
    for amount in charges:
        block = check_single(quota, spec.namespace, request=amount, limit=amount, count=spec.gpu_count)
        if block is not None:
            return block
    return check_totals(quota, spec.namespace, usage=used, add=add)


def grant(spec: AllocationSpec, node: str, gpus: list[GpuState], need: Need, table: TemplateTable,
          quota: QuotaSpec | None, used: QuotaUsage) -> Grant | Blocked:
    """The partitioned grant of ``spec`` on the chosen ``gpus`` of ``node`` (template-sized charges,
    one partition per GPU), or the quota check that blocks it (``used``: the namespace's usage)."""
    placed = [place(gpu, need, table) for gpu in gpus]
    charges = tuple(amount for amount, _ in placed)
    add = usage(charges)
    if quota is not None:
        block = quota_block(quota, spec, charges, used, add)
        if block is not None:
            return Blocked("quota", block.reason, block)
    return Grant(node, tuple(g.spec.name for g in gpus), charges, add, tuple(p for _, p in placed))
