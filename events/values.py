"""Value objects shared by intents and events: resources, GPUs, quotas, pool settings.

Units are exact integers everywhere: TFLOPS in milli-TFLOPS (``1000`` = 1 TFLOPS), VRAM in
bytes, CPU in millicores, compute share in milli-percent of one GPU (``100_000`` = 100 %).
No floats cross the wire except pool score weights. Every field is bounded by
:mod:`events.bounds` (``msgspec.Meta`` constraints checked while decoding).
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from events.bounds import (
    MAX_GPUS_PER_NODE,
    MAX_LIST,
    Attributes,
    Count,
    CpuMilli,
    GangSize,
    GangTimeout,
    GpuCount,
    GpuIndex,
    Id,
    LabelKey,
    MemoryBytes,
    MilliPercent,
    MilliTflops,
    Name,
    Percent,
    Priority,
    QuotaMilliTflops,
    QuotaVramBytes,
    ShareWeight,
    Slot,
    Token,
    VramBytes,
    Weight,
)

QOS_LEVELS: tuple[str, ...] = ("critical", "high", "medium", "low")
"""QoS classes, highest first (TensorFusion QoS: critical > high > medium > low)."""

QOS_PRIORITY: dict[str, int] = {"critical": 100_000, "high": 10_000, "medium": 0, "low": 0}
"""Priority of a request without an explicit one, by QoS (TensorFusion's PriorityClasses:
critical 100000, high 10000, medium 0; low has none, so 0)."""

PREEMPTION_SCOPES: tuple[str, ...] = ("cluster", "namespace", "off")
"""Pool preemption settings: victims from any namespace (TensorFusion's default), only from the
preemptor's namespace, or no preemption."""

ISOLATION_MODES: tuple[str, ...] = ("shared", "soft", "hard", "partitioned")
"""TensorFusion isolation modes; ``shared`` takes a whole idle GPU exclusively."""

ISOLATION_POLICIES: tuple[str, ...] = ("static", "dynamic")
"""Pool isolation policies (TensorFusion IsolationModePolicy Static/Dynamic): ``static`` keeps each
GPU's discovered ``isolation_mode``; ``dynamic`` locks an idle GPU to the mode of its first allocation."""

TOPOLOGY_MODES: tuple[str, ...] = ("soft", "hard", "off")
"""Pool topology settings (TensorFusion GPUNetworkTopologyAware mode): ``soft`` chooses GPUs inside
the chosen node by topology tier, ``hard`` also filters nodes whose best tier exceeds the pool's
``max_topology_tier``, ``off`` leaves the GPU choice to the strategy alone."""

MAX_TOPOLOGY_TIER = 3
"""Topology tiers: 0 same interconnect (NVLink) group, 1 same NUMA node, 2 cross-NUMA, 3 unknown."""

Enforcement = Literal["none", "hami-core", "tensor-fusion"]
"""How a pool's grants are enforced on the node: ``none`` (device visibility only), ``hami-core``
(HAMi-core's CUDA interposer limits VRAM and SMs) or ``tensor-fusion`` (TensorFusion's runtime reads
the pod's annotations); docs/runtime.md."""
ENFORCEMENT_MODES: tuple[str, ...] = ("none", "hami-core", "tensor-fusion")
ENFORCEMENT_BY_NAME: dict[str, Enforcement] = {
    "none": "none", "hami-core": "hami-core", "tensor-fusion": "tensor-fusion"}
"""Each mode by its name (narrows a checked string to :data:`Enforcement`)."""

PLACEMENT_STRATEGIES: tuple[str, ...] = (
    "compact-first",
    "low-load-first",
    "node-compact-gpu-low-load",
)
"""Built-in placement strategy names (TensorFusion gpuallocator strategies); more may register."""

NodePhase = Literal["Ready", "Unschedulable", "Lost"]
"""A node's phase: ``Ready``, ``Unschedulable`` (cordoned or NotReady) or ``Lost`` (heartbeat TTL ran out)."""
NODE_PHASES: tuple[NodePhase, ...] = ("Ready", "Unschedulable", "Lost")
"""Every node phase (NodePhaseChanged.phase); GET /api/v1/nodes?phase= and ``gpuledger nodes --phase`` take these."""

GPU_PHASES: tuple[str, ...] = ("Pending", "Updating", "Running", "Unknown", "Destroying", "Migrating")
"""TensorFusion GPU phases; only ``Running`` is schedulable."""

IsolationCapabilities = Annotated[
    tuple[Literal["shared", "soft", "hard", "partitioned"], ...],
    msgspec.Meta(max_length=len(ISOLATION_MODES)),
]
"""A GPU's supported isolation modes (values of :data:`ISOLATION_MODES`, at most one each)."""

MAX_GPUS_PER_ALLOCATION = 128
"""TensorFusion MaxGPUCounterPerAllocation."""


class Resources(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """An amount of GPU resources, per GPU.

    ``milli_tflops``: milli-TFLOPS; ``vram_bytes``: bytes; ``compute_milli_percent``: share of
    one GPU in thousandths of a percent, only on requests/limits and mutually exclusive with
    ``milli_tflops`` (it is converted with each GPU's own capacity, rounding up to a milli-TFLOPS).
    """

    milli_tflops: MilliTflops = 0
    vram_bytes: VramBytes = 0
    compute_milli_percent: MilliPercent = 0

    def is_zero(self) -> bool:
        """True when every dimension is zero."""
        return not (self.milli_tflops or self.vram_bytes or self.compute_milli_percent)


ZERO = Resources()


class GpuSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """One GPU as discovery reports it.

    ``name`` is the GPU's cluster-unique key, written into the pod's ``tensor-fusion.ai/gpu-ids``.
    ``capacity`` has no compute percent. ``phase`` follows TensorFusion (only Running schedules);
    ``used_by`` is "" or "tensor-fusion" for eligible GPUs.

    Topology and capabilities (all optional; the default means "unknown", as before they existed):
    ``isolation_capabilities`` lists the :data:`ISOLATION_MODES` the GPU can run (empty: unknown,
    every mode allowed, as TensorFusion does when its ``virtualization-capabilities`` annotation is
    absent). ``numa_node`` is the host NUMA node the GPU is attached to. ``interconnect_group`` names
    the GPU's NVLink domain on its node (GPUs of one node with the same non-empty group reach each
    other over NVLink; discovery uses the smallest PCI bus id of the connected component); "" means
    no NVLink peer or unknown. MIG capability is per model: see ``services.partitions.templates``.
    """

    name: Name
    capacity: Resources
    model: Name = ""
    vendor: Token = "NVIDIA"
    index: GpuIndex | None = None
    uuid: Name = ""
    numa_node: GpuIndex | None = None
    phase: Token = "Running"
    used_by: Token = ""
    isolation_mode: Token = ""
    isolation_capabilities: IsolationCapabilities = ()
    interconnect_group: Token = ""


class NodeSelectorRequirement(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A Kubernetes node selector requirement (operators In, NotIn, Exists, DoesNotExist, Gt, Lt)."""

    key: LabelKey
    operator: Token
    values: Annotated[tuple[Token, ...], msgspec.Meta(max_length=MAX_LIST)] = ()


class NodeSelectorTerm(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """Requirements ANDed together (Kubernetes NodeSelectorTerm.matchExpressions)."""

    match_expressions: Annotated[tuple[NodeSelectorRequirement, ...], msgspec.Meta(max_length=MAX_LIST)] = ()


class PreferredSchedulingTerm(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A weighted preference (1-100), as in Kubernetes PreferredSchedulingTerm."""

    weight: Percent
    preference: NodeSelectorTerm


class NodeAffinity(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """Node affinity over node labels with Kubernetes semantics: required terms are ORed."""

    required: Annotated[tuple[NodeSelectorTerm, ...], msgspec.Meta(max_length=MAX_LIST)] = ()
    preferred: Annotated[tuple[PreferredSchedulingTerm, ...], msgspec.Meta(max_length=MAX_LIST)] = ()


class GangSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """The gang a request belongs to (TensorFusion WorkloadProfile ``spec.gangScheduling``, stamped
    by its webhook as ``gang-group-key``, ``gang-required-members``, ``gang-desired-members`` and
    ``gang-timeout``; TensorFusion internal/gang/manager.go).

    ``key`` is ``namespace/workload``; ``quorum`` the members that must be placed together
    (2 ≤ quorum ≤ desired); ``desired`` the workload's replicas; ``timeout_s`` seconds a gang may
    wait for its quorum from its first member's arrival (0: forever). Rules: docs/allocation.md.
    """

    key: LabelKey
    quorum: GangSize
    desired: GangSize
    timeout_s: GangTimeout = 0


class AllocationSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """What a workload asks for (TensorFusion AllocRequest), request and limit per GPU.

    ``allocation_id`` is the pod UID. ``gpu_models`` is an allow-list (empty: any model);
    ``gpu_indices`` an allow-list of GPU indices; ``cpu_milli``/``memory_bytes`` are the pod's
    CPU (millicores) and memory (bytes) requests, checked against node allocatable when both
    sides report them. ``attributes`` carries producer metadata (autoscaling settings, owner).
    ``priority`` is the pod's PriorityClass value when it has one; None means "from QoS"
    (:func:`priority_of`). ``gang``: the gang the request is a member of (None: none).
    """

    allocation_id: Id
    namespace: Token
    pod: Name
    pool: Name
    request: Resources
    limit: Resources
    workload: Name = ""
    gpu_count: GpuCount = 1
    qos: Token = "medium"
    isolation: Token = "soft"
    gpu_models: Annotated[tuple[Name, ...], msgspec.Meta(max_length=MAX_LIST)] = ()
    vendor: Token = ""
    gpu_indices: Annotated[tuple[GpuIndex, ...], msgspec.Meta(max_length=MAX_GPUS_PER_NODE)] = ()
    node_affinity: NodeAffinity | None = None
    cpu_milli: CpuMilli = 0
    memory_bytes: MemoryBytes = 0
    partition_template: Name = ""
    attributes: Attributes = {}
    priority: Priority | None = None
    gang: GangSpec | None = None


class QuotaAmount(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A quota bound per dimension: milli-TFLOPS and bytes; ``None`` means that dimension is not bounded.

    (TensorFusion treats an omitted dimension of a present block as 0; gpuledger does not.)
    """

    milli_tflops: QuotaMilliTflops | None = None
    vram_bytes: QuotaVramBytes | None = None


class QuotaSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A namespace's GPUResourceQuota (tensor-fusion.ai/v1) spec.

    Totals bound Σ request×count / Σ limit×count over granted allocations (an explicit 0 admits
    nothing, ``None`` is unbounded); ``max_requests``, ``max_limits`` and ``max_gpu_count`` are
    per-workload caps on per-GPU values, where 0 or None means no cap (TensorFusion single.*).
    ``max_workers`` bounds the number of granted allocations. ``default_*`` are applied by
    admission, not by the allocator.
    """

    total_requests: QuotaAmount | None = None
    total_limits: QuotaAmount | None = None
    max_workers: Count | None = None
    max_requests: QuotaAmount | None = None
    max_limits: QuotaAmount | None = None
    max_gpu_count: Count | None = None
    default_requests: Resources | None = None
    default_limits: Resources | None = None
    alert_threshold_percent: Count = 95


class PoolConfig(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """Per-pool scheduling settings (TensorFusion SchedulingConfigTemplate + GPUFitConfig).

    ``vram_weight``/``tflops_weight`` weight the VRAM and TFLOPS percentages in scores
    (shipped TensorFusion config: 0.7/0.3). ``max_workers_per_node`` 0 means unlimited.
    ``preemption`` is one of :data:`PREEMPTION_SCOPES` (default ``cluster``, as TensorFusion).
    ``isolation_policy`` is one of :data:`ISOLATION_POLICIES` (default ``static``, TensorFusion's
    default). ``topology`` is one of :data:`TOPOLOGY_MODES` (default ``soft``) and
    ``max_topology_tier`` (0-:data:`MAX_TOPOLOGY_TIER`, default 3) the worst tier a multi-GPU
    placement may have under ``hard`` (TensorFusion maxAllowedTier). docs/allocation.md.

    Fair share (pools some share names; docs/allocation.md "Fair share"): ``fair_share_half_life_s``
    seconds over which a share's past usage decays when ordering waiting requests (0: the current
    usage only; KAI usage decay ``halfLifePeriod``); ``reclaim_min_runtime_s`` seconds a borrowed
    allocation runs before it may be reclaimed (0: at once); ``reclaim_max_per_minute`` reclaims
    per pool per minute (0: unbounded; Armada #5073). All default to 0, so older events decode
    unchanged.
    """

    placement: Name = "node-compact-gpu-low-load"
    vram_weight: Weight = 0.7
    tflops_weight: Weight = 0.3
    max_workers_per_node: Count = 0
    preemption: Token = "cluster"
    isolation_policy: Token = "static"
    topology: Token = "soft"
    max_topology_tier: Count = MAX_TOPOLOGY_TIER
    enforcement: Enforcement = "none"
    fair_share_half_life_s: Count = 0
    reclaim_min_runtime_s: Count = 0
    reclaim_max_per_minute: Count = 0


class ShareAmount(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """An amount per resource in one pool: milli-TFLOPS, bytes of VRAM, whole GPUs (count of GPUs held).

    ``None`` = this resource is not set (as a guarantee: 0; as a limit: it does not bound)."""

    milli_tflops: QuotaMilliTflops | None = None
    vram_bytes: QuotaVramBytes | None = None
    gpus: Count | None = None


SHARE_RESOURCES: tuple[str, ...] = ("milli_tflops", "vram_bytes", "gpus")
"""The resources a :class:`ShareAmount` sets, in the order reasons name them."""


class SharePool(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A share's terms in one pool (Kueue ResourceGroup flavor quotas: nominalQuota, borrowingLimit,
    lendingLimit; KAI deserved / limit).

    ``guaranteed``: what the share may always get back (reclaim); ``borrowing_limit``: the most it
    may use beyond its guarantee (None: unbounded); ``lending_limit``: the most of its unused
    guarantee others may borrow (None: all of it)."""

    pool: Name
    guaranteed: ShareAmount = ShareAmount()
    borrowing_limit: ShareAmount | None = None
    lending_limit: ShareAmount | None = None


class ShareSpec(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """A share: a named group of namespaces with guarantees per pool, and a weight for the surplus.

    ``parent``: one level of nesting (department -> team): a parent has no namespaces and no parent.
    ``weight``: 1..1000 (Kueue ``fairSharing.weight``, KAI ``overQuotaWeight``). The object of KAI's
    Queue, Kueue's ClusterQueue in a cohort and Volcano's Queue (docs/allocation.md "Fair share")."""

    namespaces: Annotated[tuple[Token, ...], msgspec.Meta(max_length=MAX_LIST)] = ()
    parent: Name = ""
    weight: ShareWeight = 1
    pools: Annotated[tuple[SharePool, ...], msgspec.Meta(max_length=MAX_LIST)] = ()


class Partition(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One hardware partition (NVIDIA MIG GPU instance) a partitioned allocation holds on one GPU.

    ``template``: the MIG profile name without "MIG " ("3g.40gb"); ``profile_id``: NVML's GPU
    instance profile id (what a MIG runtime creates the instance with); ``start``/``end``: the
    half-open slot range ``[start, end)`` of the GPU's memory slices it occupies (NVML's
    placement start and size). Source of the rule: TensorFusion api/v1 AllocatedPartition
    (templateId, allocatedSlotStart/End).
    """

    template: Name
    profile_id: Slot
    start: Slot
    end: Slot


class FilterCount(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """How many candidate GPUs one filter removed (TensorFusion FilterDetail)."""

    name: str
    removed: int


def priority_of(spec: AllocationSpec) -> int:
    """The request's priority: ``spec.priority`` when given (the pod's PriorityClass value), else
    :data:`QOS_PRIORITY` of its QoS (unknown QoS: 0)."""
    return spec.priority if spec.priority is not None else QOS_PRIORITY.get(spec.qos, 0)
