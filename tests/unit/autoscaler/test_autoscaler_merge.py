"""Per-worker max merging before the TFLOPS histogram, and bounded samples (issue 13 item 6).

TensorFusion's metrics query takes ``max(compute_tflops)`` per worker per minute, so a 2-GPU worker
with one idle GPU counts as its busy GPU; feeding every per-GPU row would drag the lower estimate
(the medium-QoS request) down.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from events.metrics import LATEST_SAMPLE, SampleError, UsageSample, decode_sample, encode_sample
from services.autoscaler import sources
from services.autoscaler.aggregator import WorkloadAggregator
from services.autoscaler.engine import Engine
from services.autoscaler.merge import SampleMerger
from services.autoscaler.report import ProfileSettings, offline, report_of
from services.cli.main import app
from tests.unit.autoscaler.builders import GI, T0, gpu, granted, node, sample, spec
from tests.unit.autoscaler.test_autoscaler_cli import PROFILE


def _busy(minute: int) -> float:
    return 40 + (minute * 7) % 20  # 40..59 TFLOPS on the busy GPU


def _two_gpu_samples(minutes: int, *, idle_second: bool = True) -> list[UsageSample]:
    out = []
    for i in range(minutes):
        at = T0 + timedelta(minutes=i, seconds=5)
        out.append(sample(tflops=_busy(i), vram=8 * GI, at=at))
        if idle_second:
            out.append(sample(tflops=0, vram=GI, at=at + timedelta(seconds=1)))
    return out


def test_merger_keeps_the_max_of_a_minute_and_completes_it_when_the_next_starts() -> None:
    merger = SampleMerger()
    assert merger.add("w", milli_tflops=5, vram_bytes=9, at=T0) == (True, None)
    assert merger.add("w", milli_tflops=7, vram_bytes=1, at=T0 + timedelta(seconds=59)) == (True, None)
    assert merger.add("w", milli_tflops=1, vram_bytes=1, at=T0 - timedelta(seconds=1)) == (False, None)
    taken, done = merger.add("w", milli_tflops=2, vram_bytes=2, at=T0 + timedelta(minutes=1))
    assert taken and done is not None
    assert (done.milli_tflops, done.vram_bytes, done.at) == (7, 9, T0 + timedelta(seconds=59))
    flushed = merger.flush()
    assert [(m.milli_tflops, m.window) for m in flushed] == [(2, T0 + timedelta(minutes=1))] and not merger.pending


def _profile() -> ProfileSettings:
    return ProfileSettings(yaml.safe_load(PROFILE))


def test_offline_idle_second_gpu_no_longer_drags_the_lower_estimate() -> None:
    two = offline(_two_gpu_samples(120), _profile(), workload="llama")
    one = offline(_two_gpu_samples(120, idle_second=False), _profile(), workload="llama")
    assert two["tflops"] == one["tflops"] and two["request"] == one["request"]
    unmerged = WorkloadAggregator()
    for s in _two_gpu_samples(120):  # what feeding every per-GPU row did before
        unmerged.add_sample("a-0", milli_tflops=s.milli_tflops_used, vram_bytes=s.vram_bytes_used, at=s.at)
    assert unmerged.tflops.percentile(0.5) < float(one["tflops"]["lower"])


def _engine_report(samples: list[UsageSample]) -> dict[str, object]:
    engine = Engine(new_id=lambda: "r")
    engine.on_event(node(gpu("gpu-0"), gpu("gpu-1")), now=T0)
    engine.on_event(granted(spec("a-0", pod="llama-0"), gpus=("gpu-0", "gpu-1")), now=T0)
    for s in samples:
        assert engine.ingest(s) is None
    engine.evaluate(("ml", "llama"), now=T0 + timedelta(hours=2))
    return report_of(engine, "llama")


def test_live_engine_merges_the_same_way() -> None:
    two, one = _engine_report(_two_gpu_samples(120)), _engine_report(_two_gpu_samples(120, idle_second=False))
    assert two["tflops"] == one["tflops"]
    assert two["tflops"] == offline(_two_gpu_samples(120), _profile(), workload="llama")["tflops"]


def test_samples_beyond_the_era_or_a_gpu_are_refused_naming_the_field() -> None:
    line = encode_sample(sample()).replace(b"2026-03-05T00:00:00Z", b"9999-12-31T23:59:59Z")
    with pytest.raises(SampleError, match=r"\$\.at"):
        decode_sample(line)
    with pytest.raises(SampleError, match="milli_tflops_used"):
        decode_sample(encode_sample(sample(tflops=10**8)))
    with pytest.raises(SampleError, match="byte"):
        decode_sample(encode_sample(sample()).replace(b"llama", "éllama".encode("latin-1")))
    assert decode_sample(encode_sample(sample(at=LATEST_SAMPLE))).at == LATEST_SAMPLE


def test_live_ingest_drops_out_of_range_samples_built_in_code() -> None:
    engine = Engine(new_id=lambda: "r")
    engine.on_event(node(gpu("gpu-0")), now=T0)
    engine.on_event(granted(spec("a-0", pod="llama-0")), now=T0)
    far = datetime(9999, 12, 31, 23, 59, tzinfo=UTC)
    assert engine.ingest(sample(at=far)) == "invalid"
    assert engine.ingest(sample(vram=2**50)) == "invalid"
    stamped = [{"metric": {"namespace": "ml", "pod": "llama-0"}, "value": [stamp, "0.5"]}
               for stamp in (1e20,)]
    assert sources.to_samples(engine, stamped, []) == []
    huge = [{"metric": {"namespace": "ml", "pod": "llama-0"}, "value": [1772668800.0, "1e308"]}]
    for s in sources.to_samples(engine, huge, huge):
        assert engine.ingest(s) == "invalid"
    assert engine.dropped["invalid"] >= 3


def _invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["recommend", *args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return result.exit_code, result.output


@pytest.mark.parametrize(("which", "content", "field", "text"), [
    ("samples", "été\n".encode("latin-1"), "samples", "byte 0"),
    ("samples", encode_sample(sample()).replace(b"2026-03-05", b"9999-12-31"), "samples", "$.at"),
    ("samples", b'{"x":' + b"[" * 1500 + b"]" * 1500 + b"}", "samples", "nested"),
    ("samples", b"[" * 100_000, "samples", "exceeds"),
    ("config", PROFILE.replace("llama", "été").encode("latin-1"), "config", "UTF-8"),
    ("config", b"a: " + b"[" * 5000 + b"]" * 5000, "config", "YAML"),
], ids=["latin1-samples", "year-9999", "nested-samples", "huge-line", "latin1-profile", "nested-profile"])
def test_recommend_never_shows_a_traceback(tmp_path: Path, which: str, content: bytes, field: str, text: str) -> None:
    samples, profile = tmp_path / "usage.jsonl", tmp_path / "profile.yaml"
    samples.write_bytes(encode_sample(sample()))
    profile.write_text(PROFILE)
    (samples if which == "samples" else profile).write_bytes(content)
    code, out = _invoke("--samples", str(samples), "--config", str(profile), "--json")
    error = json.loads(out)
    assert code == 2 and error["field"] == field and text in error["error"], out


def test_recommendations_beyond_the_per_gpu_bounds_are_refused_naming_the_field() -> None:
    from services.autoscaler.config import ResourceAmount, ResourcesSpec
    from services.autoscaler.cron import CronError, to_request_limit

    ok = to_request_limit(ResourcesSpec(requests=ResourceAmount(tflops="10M", vram="4Ti")), rule="r")
    assert ok.request.vram_bytes == 4 * 2**40
    for req, field in ((ResourceAmount(tflops="1", vram="8Ei"), "requests.vram"),
                       (ResourceAmount(tflops="10000001", vram="1Gi"), "requests.tflops")):
        with pytest.raises(CronError, match=field.replace(".", r"\.")):
            to_request_limit(ResourcesSpec(requests=req), rule="r")


def test_a_target_beyond_bounds_is_refused_before_the_tracker_sees_it() -> None:
    from services.autoscaler.recommendation import RequestLimit
    from services.autoscaler.view import Worker

    engine = Engine(new_id=lambda: "r")
    engine.on_event(node(gpu("gpu-0")), now=T0)
    engine.on_event(granted(spec("a-0", pod="llama-0")), now=T0)
    worker: Worker = engine.view.workers["a-0"]
    huge = RequestLimit(request=worker.current.request, limit=type(worker.current.limit)(vram_bytes=2**50))
    assert not engine._within_bounds(worker, huge)
    assert engine.dropped["resize_out_of_bounds"] == 1
    assert engine._within_bounds(worker, worker.current)
