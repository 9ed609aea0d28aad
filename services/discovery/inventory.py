"""Pure pieces every discovery source shares: report settings, GPU naming, GpuSpec building, intent ids.

A source (Kubernetes labels, NVML, a file) finds "node N has GPUs of model M with V bytes";
this module turns that into the ``RegisterNode`` intent the allocator decides on. GPU names are
``<node>-gpu-<index>`` (cluster-unique because node names are; identical whichever source
reports the GPU); they are what lands in the pod's ``tensor-fusion.ai/gpu-ids``. The NVML uuid
is kept in ``GpuSpec.uuid``. No I/O here.
"""

from __future__ import annotations

import hashlib
import uuid as uuidlib

import msgspec

from events import codec, guard
from events.intents import RegisterNode
from events.values import GpuSpec, IsolationCapabilities, Resources
from services.discovery.catalog import ModelTable


class ReportConfig(msgspec.Struct, frozen=True, kw_only=True):
    """How sources fill in what they cannot see.

    - ``pool``: pool of nodes that name none (Kubernetes: no ``pool_label``).
    - ``pool_label``: node label naming the pool (Kubernetes source).
    - ``default_milli_tflops`` / ``default_vram_bytes``: capacity of an unknown model (and VRAM of
      a GPU whose memory no one reported and whose model has no VRAM in the table).
    - ``heartbeat_ttl_s``: written into every RegisterNode (0: the node never expires).
    - ``source``: ``kubernetes``, ``nvml`` or ``static`` (RegisterNode.source).
    """

    pool: str = "default"
    pool_label: str = "gpuledger.io/pool"
    default_milli_tflops: int = 100_000
    default_vram_bytes: int = 16 * 2**30
    heartbeat_ttl_s: float = 0.0
    source: str = ""


class GpuReading(msgspec.Struct, frozen=True, kw_only=True):
    """One GPU as a source saw it: reported model name, index, measured VRAM bytes (0: unknown)."""

    model: str
    index: int
    vram_bytes: int = 0
    uuid: str = ""
    numa_node: int | None = None
    milli_tflops: int = 0
    """An explicit capacity override (static files); 0: from the model table."""
    isolation_capabilities: IsolationCapabilities = ()
    """Isolation modes the GPU supports (events.values.ISOLATION_MODES); (): unknown."""
    interconnect_group: str = ""
    """NVLink group on the node (GPUs with the same non-empty group share NVLink); "": none/unknown."""


def gpu_name(node: str, index: int) -> str:
    """The cluster-unique GPU name: ``gpu_name("node-a", 3) == "node-a-gpu-3"``."""
    return f"{node}-gpu-{index}"


def build_gpus(node: str, readings: list[GpuReading], *, table: ModelTable,
               config: ReportConfig) -> tuple[GpuSpec, ...]:
    """GpuSpecs (phase Running) with capacity from the model table; unknown models get the defaults."""
    gpus = []
    for reading in sorted(readings, key=lambda r: r.index):
        capacity = table.capacity(reading.model, vram_bytes=reading.vram_bytes, where=node,
                                  default_milli_tflops=config.default_milli_tflops,
                                  default_vram_bytes=config.default_vram_bytes)
        gpus.append(GpuSpec(
            name=gpu_name(node, reading.index),
            capacity=Resources(milli_tflops=reading.milli_tflops or capacity.milli_tflops,
                               vram_bytes=capacity.vram_bytes),
            model=capacity.model, vendor=capacity.vendor, index=reading.index,
            uuid=reading.uuid.lower(), numa_node=reading.numa_node, phase="Running",
            isolation_capabilities=reading.isolation_capabilities,
            interconnect_group=reading.interconnect_group))
    return tuple(gpus)


def content_id(intent: RegisterNode) -> str:
    """A deterministic intent id from the report's content: re-sending the same report is a no-op."""
    body = codec.encode(msgspec.structs.replace(intent, intent_id=""))
    return f"register:{intent.node}:{hashlib.sha256(body).hexdigest()[:16]}"


def finished(intent: RegisterNode) -> RegisterNode:
    """``intent`` with its content id, checked against the contract's bounds (the same checks the
    allocator makes); raises :class:`events.bounds.BoundsError` naming the field and value."""
    return guard.check_message(msgspec.structs.replace(intent, intent_id=content_id(intent)))


def fresh_id(intent: RegisterNode) -> str:
    """A new unique id, for heartbeats (each must be decided, not deduplicated)."""
    return f"heartbeat:{intent.node}:{uuidlib.uuid4().hex}"


def same_report(a: RegisterNode, b: RegisterNode) -> bool:
    """True when two reports differ at most in intent id (nothing new to tell the allocator)."""
    return msgspec.structs.replace(a, intent_id="") == msgspec.structs.replace(b, intent_id="")
