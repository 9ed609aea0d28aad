"""Readable test data for the service tests: nodes with GPUs, allocation requests, deliveries."""

from __future__ import annotations

from events import codec, intents, subjects
from events.values import AllocationSpec, GpuSpec, Resources
from services.allocator.ports import Delivery

GIB = 1 << 30


def register_node(name: str, *, gpus: int = 2, pool: str = "default", tflops: int = 100,
                  vram_gib: int = 16) -> intents.RegisterNode:
    """RegisterNode of ``name`` with ``gpus`` GPUs of ``tflops`` TFLOPS and ``vram_gib`` GiB each."""
    specs = tuple(
        GpuSpec(name=f"{name}-gpu{i}", capacity=Resources(milli_tflops=tflops * 1000, vram_bytes=vram_gib * GIB),
                model="A100", index=i)
        for i in range(gpus)
    )
    return intents.RegisterNode(intent_id=f"register-{name}", node=name, pool=pool, gpus=specs)


def request(allocation_id: str, *, pool: str = "default", tflops: int = 10, vram_gib: int = 1,
            namespace: str = "team-a", intent_id: str = "") -> intents.RequestAllocation:
    """RequestAllocation of one GPU share (``tflops`` TFLOPS, ``vram_gib`` GiB) for pod ``allocation_id``."""
    amount = Resources(milli_tflops=tflops * 1000, vram_bytes=vram_gib * GIB)
    spec = AllocationSpec(allocation_id=allocation_id, namespace=namespace, pod=allocation_id, pool=pool,
                          request=amount, limit=amount)
    return intents.RequestAllocation(intent_id=intent_id or f"req-{allocation_id}", spec=spec)


def delivery(intent: intents.AnyIntent, seq: int) -> Delivery:
    """The Delivery JetStream would hand over for ``intent`` at stream sequence ``seq``."""
    return Delivery(stream_seq=seq, subject=subjects.intent_subject(codec.tag_of(intent)),
                    data=codec.encode(intent), msg_id=intent.intent_id)


def raw_delivery(data: bytes, seq: int, *, subject: str = "gpuledger.intent.request_allocation",
                 msg_id: str = "") -> Delivery:
    """A Delivery with an arbitrary payload (poison messages)."""
    return Delivery(stream_seq=seq, subject=subject, data=data, msg_id=msg_id)
