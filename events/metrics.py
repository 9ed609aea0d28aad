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

Negative values (and values beyond one GPU's bounds, :mod:`events.bounds`) are rejected by
:func:`decode_sample` with an error naming the field; JSON has
no NaN, so a NaN never decodes either.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import msgspec

from events import guard
from events.bounds import MAX_MILLI_TFLOPS, MAX_VRAM_BYTES, BoundsError, Id, Name, Token

UsedMilliTflops = Annotated[int, msgspec.Meta(ge=0, le=MAX_MILLI_TFLOPS)]
UsedVramBytes = Annotated[int, msgspec.Meta(ge=0, le=MAX_VRAM_BYTES)]

EARLIEST_SAMPLE = datetime(1970, 1, 1, tzinfo=UTC)
"""No usage sample is older than the Unix epoch."""

LATEST_SAMPLE = datetime(2262, 4, 11, 23, 47, 16, tzinfo=UTC)
"""The last instant an int64 count of nanoseconds since the epoch can name (Go ``time.UnixNano``,
Prometheus, TensorFusion's metrics store): later timestamps are refused, so date arithmetic on
a sample (windows of 24 h, decay exponents) can never overflow Python's year 9999."""

MAX_SAMPLE_BYTES = 4096
"""A usage sample's JSON in bytes."""


class UsageSample(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, tag_field="type",
                  tag="usage_sample"):
    """One worker's usage of one GPU.

    ``workload``/``namespace`` name the workload (TensorFusion ``workload`` tag; empty workload:
    the pod is its own workload); ``pod`` and ``allocation_id`` (the pod UID) name the worker;
    ``node``/``gpu`` the device. ``milli_tflops_used`` milli-TFLOPS and ``vram_bytes_used`` bytes,
    both >= 0; ``at`` the measurement time (timezone-aware, UTC on the wire).
    """

    workload: Name
    namespace: Token
    at: datetime
    pod: Name = ""
    allocation_id: Id = ""
    node: Name = ""
    gpu: Name = ""
    milli_tflops_used: UsedMilliTflops = 0
    vram_bytes_used: UsedVramBytes = 0


class SampleError(ValueError):
    """A payload is not a valid usage sample; ``str()`` names the field (``$.milli_tflops_used``)."""


_decoder = msgspec.json.Decoder(UsageSample)
_encoder = msgspec.json.Encoder()


def decode_sample(data: bytes | str) -> UsageSample:
    """Decode one JSON usage sample; raises SampleError naming the bad field or the JSON problem.

    Bounded like intents (:mod:`events.bounds`): usage within one GPU's bounds, names within
    Kubernetes limits, valid UTF-8 (the error names the byte), at most :data:`MAX_SAMPLE_BYTES`.
    A naive timestamp (no offset) is rejected (samples from different nodes must compare), and so
    is one outside [:data:`EARLIEST_SAMPLE`, :data:`LATEST_SAMPLE`].
    """
    if len(data) > MAX_SAMPLE_BYTES:
        raise SampleError(f"invalid usage sample: payload of {len(data)} bytes exceeds {MAX_SAMPLE_BYTES} bytes")
    try:  # the hot path of the autoscaler: msgspec itself refuses bad UTF-8 and bounds its recursion
        sample = _decoder.decode(data)
    except msgspec.ValidationError as exc:
        raise SampleError(f"invalid usage sample: {exc}") from exc
    except msgspec.DecodeError as exc:
        raise SampleError(f"malformed usage sample: {exc}") from exc
    except (UnicodeDecodeError, RecursionError):
        try:
            guard.check_payload(data, limit=MAX_SAMPLE_BYTES)  # names the byte, or the depth
        except BoundsError as exc:
            raise SampleError(f"invalid usage sample: {exc}") from None
        raise SampleError("malformed usage sample: nested too deeply") from None  # pragma: no cover
    return check_sample(sample)


def check_sample(sample: UsageSample) -> UsageSample:
    """``sample`` when its timestamp is aware and within the sample era; else SampleError naming ``$.at``.

    Also for samples built in code (the Prometheus source), which no decoder checked.
    """
    if sample.at.tzinfo is None:
        raise SampleError("invalid usage sample: timestamp without a timezone - at `$.at`")
    if not EARLIEST_SAMPLE <= sample.at <= LATEST_SAMPLE:
        raise SampleError(
            f"invalid usage sample: timestamp {sample.at.isoformat()} outside "
            f"[{EARLIEST_SAMPLE.isoformat()}, {LATEST_SAMPLE.isoformat()}] - at `$.at`"
        )
    if not (0 <= sample.milli_tflops_used <= MAX_MILLI_TFLOPS and 0 <= sample.vram_bytes_used <= MAX_VRAM_BYTES):
        for name, value, most in (("milli_tflops_used", sample.milli_tflops_used, MAX_MILLI_TFLOPS),
                                  ("vram_bytes_used", sample.vram_bytes_used, MAX_VRAM_BYTES)):
            if not 0 <= value <= most:
                raise SampleError(f"invalid usage sample: {name} {value} outside [0, {most}] - at `$.{name}`")
    return sample


def encode_sample(sample: UsageSample) -> bytes:
    """The JSON bytes of ``sample`` (the wire format of ``gpuledger.metrics.<node>``)."""
    return _encoder.encode(sample)
