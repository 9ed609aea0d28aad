"""Usage samples: what node agents push on ``gpuledger.metrics.<node>`` for the autoscaler.

One :class:`UsageSample` is one worker's (pod's) usage of one GPU at one instant, the gpuledger
form of TensorFusion's ``tf_worker_usage`` line (hypervisor ``RecordWorkerMetrics``). Units are
exact integers like the rest of the contract: ``milli_tflops_used`` in milli-TFLOPS (a
TensorFusion ``compute_percentage`` converts with the GPU's own capacity:
``pct / 100 × capacity``), ``vram_bytes_used`` in bytes, ``at`` a UTC timestamp.

JSON example (one object per message, or per line in a ``.jsonl`` file)::

    {"type": "usage_sample", "workload": "llama", "namespace": "ml", "pod": "llama-0",
     "allocation_id": "0f6c...", "node": "node-a", "gpu": "gpu-a-0",
     "milli_tflops_used": 41500, "vram_bytes_used": 8589934592, "at": "2026-03-05T12:00:00Z"}

Negative values are rejected by :func:`decode_sample` with an error naming the field; JSON has
no NaN, so a NaN never decodes either.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import msgspec

NonNegative = Annotated[int, msgspec.Meta(ge=0)]


class UsageSample(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type",
                  tag="usage_sample"):
    """One worker's usage of one GPU.

    ``workload``/``namespace`` name the workload (TensorFusion ``workload`` tag; empty workload:
    the pod is its own workload); ``pod`` and ``allocation_id`` (the pod UID) name the worker;
    ``node``/``gpu`` the device. ``milli_tflops_used`` milli-TFLOPS and ``vram_bytes_used`` bytes,
    both >= 0; ``at`` the measurement time (timezone-aware, UTC on the wire).
    """

    workload: str
    namespace: str
    at: datetime
    pod: str = ""
    allocation_id: str = ""
    node: str = ""
    gpu: str = ""
    milli_tflops_used: NonNegative = 0
    vram_bytes_used: NonNegative = 0


class SampleError(ValueError):
    """A payload is not a valid usage sample; ``str()`` names the field (``$.milli_tflops_used``)."""


_decoder = msgspec.json.Decoder(UsageSample)
_encoder = msgspec.json.Encoder()


def decode_sample(data: bytes | str) -> UsageSample:
    """Decode one JSON usage sample; raises SampleError naming the bad field or the JSON problem.

    A naive timestamp (no offset) is rejected: samples from different nodes must compare.
    """
    try:
        sample = _decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise SampleError(f"invalid usage sample: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise SampleError(f"malformed usage sample: {exc}") from exc
    if sample.at.tzinfo is None:
        raise SampleError("invalid usage sample: timestamp without a timezone - at `$.at`")
    return sample


def encode_sample(sample: UsageSample) -> bytes:
    """The JSON bytes of ``sample`` (the wire format of ``gpuledger.metrics.<node>``)."""
    return _encoder.encode(sample)
