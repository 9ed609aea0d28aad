"""Bounds of the message contract: every number, length and size a message may carry, and why.

The one place the limits live. :mod:`events.values`, :mod:`events.intents` and
:mod:`events.metrics` attach them to Struct fields as ``msgspec.Meta`` constraints (checked in C
while decoding); :mod:`events.guard` checks what ``Meta`` cannot express (payload size, UTF-8,
nesting, NUL characters, the total size of ``attributes``) and is the single validation entry
point for decoders and producers. Every violation raises :class:`BoundsError` naming the field
and the value.

Why these numbers (the worst-case sum argument, tested in tests/unit/events/test_bounds.py)
-----------------------------------------------------------------------------------------
PostgreSQL stores amounts in BIGINT columns (``2^63 - 1``). A single message is bounded so that
everything derived from it fits with room to spare; sums over many messages are bounded by a
stated *envelope* of :data:`MAX_GPU_SLOTS` = 2^20 GPU slots (one slot = one GPU of one live
allocation, i.e. ``Σ gpu_count`` over live allocations, and one registered GPU counts as one
slot of capacity). The envelope is about 7× Kubernetes' largest supported cluster (150,000 pods,
kubernetes.io "Considerations for large clusters") even if every pod took one GPU.

* Per GPU: ``milli_tflops`` ≤ :data:`MAX_MILLI_TFLOPS` = 10^10 (10^7 TFLOPS, ~500× the densest
  FP4 figure of any GPU shipped) and ``vram_bytes`` ≤ :data:`MAX_VRAM_BYTES` = 2^42 (4 TiB,
  ~14× NVIDIA B300's 288 GB).
* One allocation: request/limit × ``gpu_count`` ≤ 2^42 × 2^10 = 2^52 bytes and 10^13
  milli-TFLOPS (the "VRAM limit 4Ei on 2 GPUs" quota overflow cannot be expressed).
* One GPU's ``used``/``available``: a charge fits the GPU's capacity when granted, so
  ``|used|, |available|`` ≤ :data:`MAX_VRAM_BYTES` / :data:`MAX_MILLI_TFLOPS` (+ capacity).
* A namespace's quota usage ``Σ request×count`` and ``Σ limit×count`` over live allocations:
  ≤ slots × per-GPU bound ≤ 2^20 × 2^42 = 2^62 bytes and 2^20 × 10^10 ≈ 1.05·10^16
  milli-TFLOPS, both < 2^63. The same holds for a pool's capacity sum over its GPUs.
* Quota totals are bounded by that same largest sum (:data:`MAX_QUOTA_VRAM_BYTES` = 2^62,
  :data:`MAX_QUOTA_MILLI_TFLOPS`), so usage and quota compare inside BIGINT.
Beyond the envelope the allocator's per-intent isolation turns the one intent whose rows do not
fit into an ``IntentRejected``; nothing stalls.

Amounts are bounded in magnitude (``-MAX ≤ v ≤ MAX``): the sign rules (a negative request, a
``gpu_count`` of 0 or above TensorFusion's 128) stay the allocator's, which answers them with an
``AllocationRejected`` naming the field, as TensorFusion rejects them.

Names and ids: Kubernetes object names are at most 253 characters, namespaces and label values
63, label keys 317 (253-character prefix, ``/``, 63-character name). Ids are at most
:data:`MAX_ID_LENGTH` = 512 characters: the admission fallback id ``<namespace>/<pod>`` (317)
plus the ``admit-`` prefix fits, and 512 characters × 4 bytes of UTF-8 = 2,048 bytes stays under
PostgreSQL's btree row limit of 2,704 bytes, as does every indexed name (253 × 4 = 1,012 bytes,
two of them in ``(pool, model)``).

Sizes: NATS refuses payloads above 1 MiB. An intent is at most :data:`MAX_INTENT_BYTES`
(256 KiB); every event derived from one repeats at most its fields plus bounded extras, and
``IntentRejected`` echoes at most :data:`MAX_ECHO_BYTES` of the raw payload (cut with
:data:`TRUNCATION_MARKER`), so an event stays far below 1 MiB.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

BIGINT_MAX = 2**63 - 1
"""PostgreSQL BIGINT's largest value (the columns of amounts and positions)."""

INT32_MAX = 2**31 - 1
"""PostgreSQL INTEGER's (and Go int32's) largest value: counts such as ``gpu_count`` columns."""

MAX_GPU_SLOTS = 2**20
"""The envelope of the sum argument: GPU slots (Σ gpu_count of live allocations, or GPUs summed)."""

MAX_MILLI_TFLOPS = 10**10
"""Per-GPU TFLOPS in milli-TFLOPS: 10^7 TFLOPS (requests, limits, capacities, usage samples)."""

MAX_VRAM_BYTES = 2**42
"""Per-GPU VRAM in bytes: 4 TiB (requests, limits, capacities, usage samples)."""

MAX_COMPUTE_MILLI_PERCENT = 100_000
"""A compute share is at most one whole GPU: 100 % in milli-percent."""

MAX_QUOTA_MILLI_TFLOPS = MAX_GPU_SLOTS * MAX_MILLI_TFLOPS
"""A quota amount in milli-TFLOPS: the largest usage sum the envelope can produce (~1.05·10^16)."""

MAX_QUOTA_VRAM_BYTES = MAX_GPU_SLOTS * MAX_VRAM_BYTES
"""A quota amount in bytes: 2^62, the largest usage sum the envelope can produce."""

MAX_GPU_COUNT = 1024
"""GPUs of one allocation (the allocator itself grants at most TensorFusion's 128)."""

MAX_GPUS_PER_NODE = 1024
"""GPUs one RegisterNode may list; GPU indices are below it (``index`` ≤ 1023)."""

MAX_COUNT = INT32_MAX
"""Other counts (quota ``max_workers``/``max_gpu_count``, ``max_workers_per_node``): Go int32."""

MAX_GANG_MEMBERS = 1024
"""Members of one gang (quorum and desired; TensorFusion bounds neither beyond int32): one gang
decision places at most this many requests, which bounds its cost and its GangPlaced event (one
node name per distinct node)."""

MAX_GANG_TIMEOUT_S = 365 * 24 * 3600
"""A gang timeout in whole seconds: 0 (wait forever) to one year."""

MAX_CPU_MILLI = 10**9
"""CPU in millicores, of a pod or a node: one million cores."""

MAX_MEMORY_BYTES = 2**50
"""Host memory in bytes, of a pod or a node: 1 PiB."""

MAX_HEARTBEAT_TTL_S = 365 * 24 * 3600.0
"""A node heartbeat TTL: finite, 0 (never expires) to one year."""

MAX_WEIGHT = 1e6
"""Pool score weights: finite, 0 to 10^6 (scores multiply percentages by them)."""

MAX_PERCENT = 100
"""A percentage field (quota ``alert_threshold_percent``) in magnitude."""

MAX_NAME_LENGTH = 253
"""Kubernetes object names (DNS subdomain): pods, nodes, GPUs, pools, workloads, models."""

MAX_LABEL_VALUE_LENGTH = 63
"""Kubernetes label values and DNS labels: namespaces, short tokens (QoS, phase, vendor)."""

MAX_LABEL_KEY_LENGTH = 317
"""Kubernetes label/annotation keys: a 253-character prefix, ``/``, a 63-character name."""

MAX_ID_LENGTH = 512
"""Intent and allocation ids (UTF-8 ≤ 2,048 bytes, under the 2,704-byte btree row limit)."""

MAX_TEXT_LENGTH = 1024
"""Free text: release reasons, discovery source names."""

MAX_LABELS = 1024
"""Node labels per RegisterNode (Node Feature Discovery alone adds a few hundred)."""

MAX_ATTRIBUTES = 64
"""Entries of ``AllocationSpec.attributes``."""

MAX_ATTRIBUTES_BYTES = 16 * 1024
"""UTF-8 bytes of all ``attributes`` keys and values together."""

MAX_LIST = 256
MAX_SHARE_WEIGHT = 1000
"""The largest share weight (a share of weight 1000 counts its usage a thousandth)."""
"""Short lists: GPU models, node affinity terms, match expressions and their values."""

MAX_PARTITION_SLOTS = 64
"""Placement slots of one GPU (NVIDIA MIG has 8 memory slices; room for finer vendors)."""

MAX_INTENT_BYTES = 256 * 1024
"""An intent's JSON payload in bytes (NATS accepts 1 MiB)."""

MAX_DEPTH = 32
"""JSON nesting depth of an intent (the deepest real intent, a node affinity, nests 8 levels)."""

MAX_ECHO_BYTES = 4096
"""Bytes of a rejected payload (or of one offending value) echoed into ``IntentRejected``."""

TRUNCATION_MARKER = "…[truncated]"
"""Appended to an echo that was cut."""


class BoundsError(ValueError):
    """A message breaks the contract: ``field`` is its JSON path (``spec.request.vram_bytes``,
    "" for the payload as a whole), ``value`` the offending value as text (truncated)."""

    def __init__(self, message: str, *, field: str = "", value: str = "") -> None:
        super().__init__(message)
        self.field = field
        self.value = value


def echo(text: str, limit: int = MAX_ECHO_BYTES) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, with :data:`TRUNCATION_MARKER` when cut."""
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return text
    return data[: limit - len(TRUNCATION_MARKER.encode())].decode("utf-8", "ignore") + TRUNCATION_MARKER


def _magnitude(bound: int) -> msgspec.Meta:
    return msgspec.Meta(ge=-bound, le=bound)


def _text(limit: int) -> msgspec.Meta:
    return msgspec.Meta(max_length=limit)


MilliTflops = Annotated[int, _magnitude(MAX_MILLI_TFLOPS)]
VramBytes = Annotated[int, _magnitude(MAX_VRAM_BYTES)]
MilliPercent = Annotated[int, _magnitude(MAX_COMPUTE_MILLI_PERCENT)]
QuotaMilliTflops = Annotated[int, _magnitude(MAX_QUOTA_MILLI_TFLOPS)]
QuotaVramBytes = Annotated[int, _magnitude(MAX_QUOTA_VRAM_BYTES)]
GpuCount = Annotated[int, _magnitude(MAX_GPU_COUNT)]
GpuIndex = Annotated[int, _magnitude(MAX_GPUS_PER_NODE - 1)]
Count = Annotated[int, _magnitude(MAX_COUNT)]
CpuMilli = Annotated[int, _magnitude(MAX_CPU_MILLI)]
MemoryBytes = Annotated[int, _magnitude(MAX_MEMORY_BYTES)]
Percent = Annotated[int, _magnitude(MAX_PERCENT)]
Slot = Annotated[int, msgspec.Meta(ge=0, le=MAX_PARTITION_SLOTS)]
"""A partition slot boundary: 0..:data:`MAX_PARTITION_SLOTS` (a range's end may equal it)."""
Priority = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
"""A pod priority (Kubernetes PriorityClass value: a 32-bit signed integer)."""
GangSize = Annotated[int, _magnitude(MAX_GANG_MEMBERS)]
GangTimeout = Annotated[int, msgspec.Meta(ge=0, le=MAX_GANG_TIMEOUT_S)]
SchemaVersion = Annotated[int, msgspec.Meta(ge=0, le=2**15)]
HeartbeatTtl = Annotated[float, msgspec.Meta(ge=0.0, le=MAX_HEARTBEAT_TTL_S)]
Weight = Annotated[float, msgspec.Meta(ge=0.0, le=MAX_WEIGHT)]
ShareWeight = Annotated[int, msgspec.Meta(ge=1, le=MAX_SHARE_WEIGHT)]
"""A share's weight for the surplus: an integer 1..:data:`MAX_SHARE_WEIGHT` (Kueue
``fairSharing.weight``, KAI ``overQuotaWeight``)."""
Id = Annotated[str, _text(MAX_ID_LENGTH)]
Name = Annotated[str, _text(MAX_NAME_LENGTH)]
Token = Annotated[str, _text(MAX_LABEL_VALUE_LENGTH)]
LabelKey = Annotated[str, _text(MAX_LABEL_KEY_LENGTH)]
Text = Annotated[str, _text(MAX_TEXT_LENGTH)]
AttributeValue = Annotated[str, _text(MAX_ATTRIBUTES_BYTES)]
Labels = Annotated[dict[LabelKey, Token], msgspec.Meta(max_length=MAX_LABELS)]
Attributes = Annotated[dict[LabelKey, AttributeValue], msgspec.Meta(max_length=MAX_ATTRIBUTES)]
