"""Usage samples: the events.metrics schema, malformed and unattributable samples, Prometheus joins."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from events.metrics import SampleError, UsageSample, decode_sample, encode_sample
from services.autoscaler import sources
from services.autoscaler.engine import Engine
from tests.unit.autoscaler.builders import GI, T0, gpu, granted, node, sample, spec


def engine_with_worker() -> Engine:
    engine = Engine(new_id=lambda: "x")
    engine.view.apply(node(gpu(tflops=100, vram_gi=80)))
    engine.view.apply(granted(spec("a-0", pod="llama-0")))
    return engine


def test_sample_round_trips_through_json() -> None:
    one = sample(tflops=41.5, vram=8 * GI)
    assert decode_sample(encode_sample(one)) == one
    assert b'"type":"usage_sample"' in encode_sample(one)


@pytest.mark.parametrize(("payload", "field"), [
    (b'{"type":"usage_sample","workload":"w","namespace":"n","at":"2026-03-05T00:00:00Z","milli_tflops_used":-1}',
     "milli_tflops_used"),
    (b'{"type":"usage_sample","workload":"w","namespace":"n","at":"2026-03-05T00:00:00Z","vram_bytes_used":NaN}',
     "malformed"),
    (b'{"type":"usage_sample","workload":"w","namespace":"n","at":"2026-03-05T00:00:00"}', "$.at"),
    (b'{"type":"usage_sample","namespace":"n","at":"2026-03-05T00:00:00Z"}', "workload"),
    (b"not json", "malformed"),
])
def test_bad_payloads_are_rejected_naming_the_problem(payload: bytes, field: str) -> None:
    with pytest.raises(SampleError, match=field.replace("$", r"\$")):
        decode_sample(payload)


def test_malformed_and_unknown_samples_are_counted_and_service_keeps_going() -> None:
    engine = engine_with_worker()
    bad = [b'{"type":"usage_sample","workload":"llama","namespace":"ml","at":"2026-03-05T00:00:00Z",'
           b'"milli_tflops_used":-5}', b'{"vram_bytes_used": NaN}', b"\xff"]
    assert [sources.take_message(engine, data) for data in bad] == ["invalid"] * 3
    unknown = sample(workload="ghost", allocation_id="nope", pod="ghost-0")
    assert engine.ingest(unknown) == "unknown_workload"
    assert engine.ingest(sample(allocation_id="a-0", at=T0)) is None
    assert engine.ingest(sample(allocation_id="a-0", at=T0 - timedelta(minutes=5))) == "out_of_order"
    assert dict(engine.dropped) == {"invalid": 3, "unknown_workload": 1, "out_of_order": 1}
    engine.flush(("ml", "llama"))
    assert engine.aggregators[("ml", "llama")].sample_count == 1


def test_sample_without_allocation_id_is_attributed_by_workload_name() -> None:
    engine = engine_with_worker()
    assert engine.ingest(UsageSample(workload="llama", namespace="ml", pod="llama-0", at=T0,
                                     milli_tflops_used=1000)) is None


def _vector(*items: tuple[str, str, object]) -> list[dict[str, object]]:
    return [{"metric": {"namespace": ns, "pod": pod}, "value": [1772668800.0, str(value)]} for ns, pod, value in items]


def test_prometheus_vectors_join_per_pod_and_convert_the_compute_fraction() -> None:
    engine = engine_with_worker()
    samples = sources.to_samples(engine, _vector(("ml", "llama-0", 0.25)), _vector(("ml", "llama-0", 3 * GI)))
    assert len(samples) == 1
    got = samples[0]
    assert (got.allocation_id, got.workload, got.milli_tflops_used, got.vram_bytes_used) == ("a-0", "llama", 25_000,
                                                                                             3 * GI)


@pytest.mark.parametrize(("tflops", "vram", "reason"), [
    (_vector(("ml", "llama-0", math.nan)), _vector(("ml", "llama-0", 1)), "nan"),
    (_vector(("ml", "llama-0", "NaN")), [], "nan"),
    (_vector(("ml", "llama-0", -0.5)), [], "negative"),
    (_vector(("ml", "other-0", 0.5)), [], "unknown_workload"),
])
def test_prometheus_bad_values_are_counted_and_dropped(tflops: list[dict[str, object]],
                                                       vram: list[dict[str, object]], reason: str) -> None:
    engine = engine_with_worker()
    assert sources.to_samples(engine, tflops, vram) == []
    assert engine.dropped[reason] == 1
