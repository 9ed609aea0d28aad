"""The message contract: tags are explicit, round trips are exact, bad payloads are named."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

import events
from events import codec, decisions, intents, quantity, values

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def test_events_package_is_ours_not_the_pypi_distribution() -> None:
    assert Path(events.__file__).resolve().parent.parent == Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("cls", intents.INTENT_TYPES + decisions.EVENT_TYPES)
def test_every_message_has_an_explicit_snake_case_tag(cls: type[msgspec.Struct]) -> None:
    tag = codec.tag_of(cls)
    assert tag == tag.lower() and " " not in tag and tag != cls.__name__


def test_intent_round_trip_keeps_every_field() -> None:
    spec = values.AllocationSpec(
        allocation_id="uid-1", namespace="ns", pod="p", pool="pool-a",
        request=values.Resources(milli_tflops=500, vram_bytes=2**30),
        limit=values.Resources(compute_milli_percent=50_000, vram_bytes=2**31),
        gpu_count=2, qos="high", gpu_models=("A100",), gpu_indices=(0, 1),
    )
    intent = intents.RequestAllocation(intent_id="i-1", spec=spec)
    assert codec.decode_intent(codec.encode(intent)) == intent


def test_event_round_trip() -> None:
    event = decisions.GpuPhaseChanged(at=NOW, gpu="g", node="n", pool="p", phase="Unknown", previous="Running")
    assert codec.decode_event(codec.encode(event)) == event


def test_unknown_intent_tag_is_a_decode_error_naming_the_tag() -> None:
    with pytest.raises(codec.DecodeError, match="launch_missiles"):
        codec.decode_intent(b'{"type": "launch_missiles", "intent_id": "x"}')


def test_missing_field_is_named() -> None:
    with pytest.raises(codec.DecodeError, match="allocation_id"):
        codec.decode_intent(b'{"type": "release_allocation", "intent_id": "x"}')


def test_garbage_is_a_decode_error() -> None:
    with pytest.raises(codec.DecodeError):
        codec.decode_intent(b"\xff not json")


def test_upcaster_lifts_a_version_0_granted_event() -> None:
    old = (
        b'{"type":"allocation_granted","schema_version":0,"at":"2026-01-01T00:00:00Z",'
        b'"spec":{"allocation_id":"u","namespace":"ns","pod":"p","pool":"a",'
        b'"request":{"milli_tflops":1000},"limit":{}},"node":"n","gpu_names":["g1","g2"]}'
    )
    event = codec.decode_event(old)
    assert isinstance(event, decisions.AllocationGranted)
    assert event.gpus == ("g1", "g2")
    assert event.charges == (values.Resources(milli_tflops=1000),) * 2
    assert event.schema_version == events.SCHEMA_VERSION


@pytest.mark.parametrize(
    ("text", "milli"),
    [("500m", 500), ("1", 1000), ("1.5", 1500), ("1k", 1_000_000), ("0.0001", 1), ("1e3", 1_000_000)],
)
def test_quantity_milli_values_round_up_like_kubernetes(text: str, milli: int) -> None:
    assert quantity.to_milli(text) == milli


@pytest.mark.parametrize(
    ("text", "canonical"),
    [("1024Mi", "1Gi"), ("4Gi", "4Gi"), ("1536Mi", "1536Mi"), ("1000", "1k"), ("1500", "1500")],
)
def test_bytes_are_formatted_canonically(text: str, canonical: str) -> None:
    assert quantity.format_bytes(quantity.to_value(text)) == canonical


@pytest.mark.parametrize("bad", ["", "abc", "1.2.3", "5 Gi", "Gi", "--1"])
def test_bad_quantities_are_rejected_with_the_value_quoted(bad: str) -> None:
    with pytest.raises(quantity.QuantityError, match="invalid quantity"):
        quantity.parse(bad)
