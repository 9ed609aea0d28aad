"""Every bound of events.bounds: the boundary decodes, one past it is refused naming the field."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from events import bounds, codec, decisions, guard, intents, values
from tests.corpus.bad_intents import Payload, _set, pool, quota, register, release, request

Case = tuple[str, Callable[[str], Payload], str, Any, Any]

INT_CASES: list[Case] = [
    ("request-tflops", request, "spec.request.milli_tflops", bounds.MAX_MILLI_TFLOPS, None),
    ("limit-vram", request, "spec.limit.vram_bytes", bounds.MAX_VRAM_BYTES, None),
    ("limit-percent", request, "spec.limit.compute_milli_percent", bounds.MAX_COMPUTE_MILLI_PERCENT, None),
    ("gpu-count", request, "spec.gpu_count", bounds.MAX_GPU_COUNT, None),
    ("cpu", request, "spec.cpu_milli", bounds.MAX_CPU_MILLI, None),
    ("memory", request, "spec.memory_bytes", bounds.MAX_MEMORY_BYTES, None),
    ("capacity-vram", register, "gpus.0.capacity.vram_bytes", bounds.MAX_VRAM_BYTES, "gpus[0].capacity.vram_bytes"),
    ("capacity-tflops", register, "gpus.0.capacity.milli_tflops", bounds.MAX_MILLI_TFLOPS,
     "gpus[0].capacity.milli_tflops"),
    ("gpu-index", register, "gpus.0.index", bounds.MAX_GPUS_PER_NODE - 1, "gpus[0].index"),
    ("node-cpu", register, "cpu_milli", bounds.MAX_CPU_MILLI, None),
    ("quota-tflops", quota, "spec.total_requests.milli_tflops", bounds.MAX_QUOTA_MILLI_TFLOPS, None),
    ("quota-vram", quota, "spec.total_requests.vram_bytes", bounds.MAX_QUOTA_VRAM_BYTES, None),
    ("quota-workers", quota, "spec.max_workers", bounds.MAX_COUNT, None),
    ("pool-workers", pool, "config.max_workers_per_node", bounds.MAX_COUNT, None),
]

TEXT_CASES: list[Case] = [
    ("intent-id", request, "intent_id", bounds.MAX_ID_LENGTH, None),
    ("allocation-id", request, "spec.allocation_id", bounds.MAX_ID_LENGTH, None),
    ("release-id", release, "allocation_id", bounds.MAX_ID_LENGTH, None),
    ("pod", request, "spec.pod", bounds.MAX_NAME_LENGTH, None),
    ("pool", request, "spec.pool", bounds.MAX_NAME_LENGTH, None),
    ("workload", request, "spec.workload", bounds.MAX_NAME_LENGTH, None),
    ("namespace", request, "spec.namespace", bounds.MAX_LABEL_VALUE_LENGTH, None),
    ("quota-namespace", quota, "namespace", bounds.MAX_LABEL_VALUE_LENGTH, None),
    ("node", register, "node", bounds.MAX_NAME_LENGTH, None),
    ("gpu", register, "gpus.0.name", bounds.MAX_NAME_LENGTH, "gpus[0].name"),
    ("model", register, "gpus.0.model", bounds.MAX_NAME_LENGTH, "gpus[0].model"),
    ("source", register, "source", bounds.MAX_TEXT_LENGTH, None),
    ("reason", release, "reason", bounds.MAX_TEXT_LENGTH, None),
    ("placement", pool, "config.placement", bounds.MAX_NAME_LENGTH, None),
]


def _refused(payload: Payload) -> codec.DecodeError:
    with pytest.raises(codec.DecodeError) as info:
        codec.decode_intent(msgspec.json.encode(payload))
    return info.value


@pytest.mark.parametrize(("name", "make", "path", "limit", "field"), INT_CASES, ids=[c[0] for c in INT_CASES])
def test_integer_bounds(name: str, make: Callable[[str], Payload], path: str, limit: int, field: str | None) -> None:
    for ok in (limit, -limit):
        codec.decode_intent(msgspec.json.encode(_set(make(name), path, ok)))
    for bad in (limit + 1, -limit - 1):
        error = _refused(_set(make(name), path, bad))
        assert error.field == (field or path) and error.value == str(bad)
        assert (field or path) in str(error) and str(bad) in str(error)


@pytest.mark.parametrize(("name", "make", "path", "limit", "field"), TEXT_CASES, ids=[c[0] for c in TEXT_CASES])
def test_text_bounds(name: str, make: Callable[[str], Payload], path: str, limit: int, field: str | None) -> None:
    codec.decode_intent(msgspec.json.encode(_set(make(name), path, "é" * limit)))
    error = _refused(_set(make(name), path, "é" * (limit + 1)))
    assert error.field == (field or path) and error.value.startswith("éé")


@pytest.mark.parametrize(("path", "limit"), [("heartbeat_ttl_s", bounds.MAX_HEARTBEAT_TTL_S)])
def test_heartbeat_ttl_is_finite_and_at_most_a_year(path: str, limit: float) -> None:
    assert codec.decode_intent(msgspec.json.encode(_set(register("ttl"), path, limit)))
    for bad in (limit * 1.0000001, -0.001, 1e15):
        assert _refused(_set(register("ttl"), path, bad)).field == path
    assert _refused_raw(msgspec.json.encode(register("ttl")).replace(b"90.0", b"1e400")).field == path


@pytest.mark.parametrize("name", ["vram_weight", "tflops_weight"])
def test_weights_are_finite_within_zero_and_a_million(name: str) -> None:
    for ok in (0.0, bounds.MAX_WEIGHT):
        codec.decode_intent(msgspec.json.encode(_set(pool("w"), f"config.{name}", ok)))
    for bad in (-1e-9, bounds.MAX_WEIGHT * 1.000001, 1e308):
        assert _refused(_set(pool("w"), f"config.{name}", bad)).field == f"config.{name}"


def _refused_raw(data: bytes) -> codec.DecodeError:
    with pytest.raises(codec.DecodeError) as info:
        codec.decode_intent(data)
    return info.value


def test_list_and_map_sizes() -> None:
    gpu = register()["gpus"][0]
    codec.decode_intent(msgspec.json.encode(_set(register("g"), "gpus", [gpu] * bounds.MAX_GPUS_PER_NODE)))
    assert _refused(_set(register("g"), "gpus", [gpu] * (bounds.MAX_GPUS_PER_NODE + 1))).field == "gpus"
    labels = {f"k{i}": "v" for i in range(bounds.MAX_LABELS)}
    codec.decode_intent(msgspec.json.encode(_set(register("l"), "labels", labels)))
    assert _refused(_set(register("l"), "labels", {**labels, "one-more": "v"})).field == "labels"
    attributes = {f"k{i}": "v" for i in range(bounds.MAX_ATTRIBUTES)}
    codec.decode_intent(msgspec.json.encode(_set(request("a"), "spec.attributes", attributes)))
    assert _refused(_set(request("a"), "spec.attributes", {**attributes, "x": "v"})).field == "spec.attributes"
    assert _refused(_set(register("l"), "labels", {"k" * 318: "v"})).field == "labels"
    assert _refused(_set(register("l"), "labels", {"k": "v" * 64})).field == "labels"


def test_attribute_bytes_boundary() -> None:
    exact = {"k": "v" * (bounds.MAX_ATTRIBUTES_BYTES - 1)}
    codec.decode_intent(msgspec.json.encode(_set(request("a"), "spec.attributes", exact)))
    error = _refused(_set(request("a"), "spec.attributes", {"k": "é" * (bounds.MAX_ATTRIBUTES_BYTES // 2)}))
    assert error.field == "spec.attributes" and error.value == str(bounds.MAX_ATTRIBUTES_BYTES + 1)


def test_payload_size_boundary() -> None:
    base = msgspec.json.encode(_set(release("s"), "reason", ""))
    padded = base[:-1] + b',"pad":"' + b"x" * (bounds.MAX_INTENT_BYTES - len(base) - 9) + b'"}'
    assert len(padded) == bounds.MAX_INTENT_BYTES
    codec.decode_intent(padded)
    over = padded[:-2] + b'x"}'
    error = _refused_raw(over)
    assert error.field == "" and str(bounds.MAX_INTENT_BYTES + 1) in str(error)


def test_nesting_boundary_counts_brackets_outside_strings_only() -> None:
    base = msgspec.json.encode(request("n"))
    deepest = bounds.MAX_DEPTH - 1  # the intent object itself is one level
    ok = base[:-1] + b',"x":' + b"[" * deepest + b"]" * deepest + b"}"
    codec.decode_intent(ok)
    assert "33 levels" in str(_refused_raw(ok[:-1].replace(b'"x":[', b'"x":[[', 1) + b"]}"))
    quoted = base[:-1] + b',"x":"' + b"{[" * 1000 + b'"}'
    codec.decode_intent(quoted)


def test_invalid_utf8_names_the_byte_position() -> None:
    data = b'{"type":"remove_node","intent_id":"i","node":"' + "été".encode("latin-1") + b'"}'
    error = _refused_raw(data)
    assert "byte 46" in str(error) and error.field == ""
    assert "character" in str(_refused_raw('{"type":"remove_node","intent_id":"\ud800","node":"n"}'))


def test_str_and_memoryview_payloads_are_accepted() -> None:
    data = msgspec.json.encode(request("m"))
    assert codec.decode_intent(data.decode()) == codec.decode_intent(memoryview(data).tobytes())


def test_worst_case_sums_fit_bigint() -> None:
    """The docstring argument of events.bounds, as arithmetic."""
    per_allocation_vram = bounds.MAX_VRAM_BYTES * bounds.MAX_GPU_COUNT
    per_allocation_tflops = bounds.MAX_MILLI_TFLOPS * bounds.MAX_GPU_COUNT
    assert per_allocation_vram <= bounds.MAX_QUOTA_VRAM_BYTES and per_allocation_tflops <= bounds.MAX_QUOTA_MILLI_TFLOPS
    assert bounds.MAX_GPU_SLOTS * bounds.MAX_VRAM_BYTES <= bounds.MAX_QUOTA_VRAM_BYTES <= bounds.BIGINT_MAX
    assert bounds.MAX_GPU_SLOTS * bounds.MAX_MILLI_TFLOPS <= bounds.MAX_QUOTA_MILLI_TFLOPS <= bounds.BIGINT_MAX
    # usage and quota of one namespace side by side (usage - quota, quota - usage) stay in range
    assert bounds.MAX_QUOTA_VRAM_BYTES * 2 <= bounds.BIGINT_MAX + 1
    assert bounds.MAX_GPU_COUNT <= bounds.INT32_MAX and bounds.MAX_COUNT <= bounds.INT32_MAX
    assert bounds.MAX_GPU_SLOTS >= 150_000  # Kubernetes' largest supported cluster, one GPU per pod
    btree_row = 2704
    assert btree_row > bounds.MAX_ID_LENGTH * 4 + 16 and btree_row > 2 * bounds.MAX_NAME_LENGTH * 4 + 16


def _largest_spec(count: int) -> values.AllocationSpec:
    big = values.Resources(milli_tflops=bounds.MAX_MILLI_TFLOPS, vram_bytes=bounds.MAX_VRAM_BYTES)
    return values.AllocationSpec(
        allocation_id="a" * bounds.MAX_ID_LENGTH, namespace="n" * 63, pod="p" * 253, pool="q" * 253,
        request=big, limit=big, workload="w" * 253, gpu_count=count,
        attributes={"k": "v" * (bounds.MAX_ATTRIBUTES_BYTES - 1)},
        gpu_models=tuple("m" * 253 for _ in range(bounds.MAX_LIST)),
    )


def test_events_derived_from_the_largest_intents_stay_below_the_nats_limit() -> None:
    nats_max = 2**20
    spec = _largest_spec(bounds.MAX_GPU_COUNT)
    intent = guard.check_message(intents.RequestAllocation(intent_id="i" * bounds.MAX_ID_LENGTH, spec=spec))
    assert len(codec.encode(intent)) <= bounds.MAX_INTENT_BYTES
    at = datetime(2026, 1, 1, tzinfo=UTC)
    granted = decisions.AllocationGranted(
        at=at, spec=spec, node="n" * 253, gpus=tuple("g" * 253 for _ in range(spec.gpu_count)),
        charges=(spec.request,) * spec.gpu_count)
    assert len(codec.encode(granted)) < nats_max // 2
    rejected = decisions.IntentRejected(
        at=at, intent_id="i" * bounds.MAX_ID_LENGTH, reason=bounds.echo("r" * 10**6), value=bounds.echo("v" * 10**6),
        raw=bounds.echo("x" * 10**6))
    assert len(codec.encode(rejected)) <= 4 * bounds.MAX_ECHO_BYTES


def test_echo_truncates_with_a_marker_on_a_character_boundary() -> None:
    assert bounds.echo("short") == "short"
    cut = bounds.echo("é" * 5000, 100)
    assert cut.endswith(bounds.TRUNCATION_MARKER) and len(cut.encode()) <= 100
    cut.encode("utf-8")


def test_producers_check_messages_they_build() -> None:
    ok = intents.RequestAllocation(intent_id="i", spec=_largest_spec(2))
    assert guard.check_message(ok) is ok
    bad = intents.RequestAllocation(intent_id="i", spec=msgspec.structs.replace(
        ok.spec, limit=values.Resources(vram_bytes=8 * 2**60)))
    with pytest.raises(bounds.BoundsError) as info:
        guard.check_message(bad)
    assert info.value.field == "spec.limit.vram_bytes" and info.value.value == str(8 * 2**60)
    too_many = msgspec.structs.replace(ok.spec, attributes={"k": "v" * bounds.MAX_ATTRIBUTES_BYTES})
    with pytest.raises(bounds.BoundsError, match=r"spec\.attributes"):
        guard.check_message(intents.RequestAllocation(intent_id="i", spec=too_many))


@pytest.mark.parametrize("text", ["\ud800", "ok\udfff", "\udc80x"])
def test_a_lone_surrogate_is_a_bounds_error_naming_the_field_not_a_crash(text: str) -> None:
    configure = intents.ConfigurePool(intent_id="i", pool="default", config=values.PoolConfig(placement=text))
    with pytest.raises(bounds.BoundsError) as info:
        guard.check_message(configure)
    assert info.value.field == "config.placement" and "surrogate" in str(info.value)
    str(info.value).encode("ascii")  # the message itself is loggable text
    spec = msgspec.structs.replace(_largest_spec(1), attributes={text: "v"})
    with pytest.raises(bounds.BoundsError) as info:
        guard.check_message(intents.RequestAllocation(intent_id="i", spec=spec))
    assert info.value.field == f"spec.attributes.{text!a}"


def test_surrogate_field_finds_the_first_bad_string_or_key() -> None:
    assert guard.surrogate_field({"a": ["ok", {"b": "x\ud800"}]}) == "a[1].b"
    assert guard.surrogate_field({"a": {"\ud800": 1}}) == "a.'\\ud800'"
    assert guard.surrogate_field({"a": ["ok", "é", "日本"]}) is None
