"""GpuSpec's optional topology and capability fields: old payloads decode, defaults stay off the wire."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import get_args

import msgspec
import pytest

from events import codec, values
from events.decisions import NodeRegistered
from events.intents import RegisterNode

OLD_REGISTER = (
    b'{"type":"register_node","node":"n","pool":"p","gpus":[{"name":"n-gpu-0",'
    b'"capacity":{"milli_tflops":989000,"vram_bytes":85520809984},"model":"H100_SXM","index":0,'
    b'"numa_node":0}],"intent_id":"r-1"}'
)
"""A RegisterNode as producers wrote it before isolation capabilities and interconnect groups."""


def test_an_old_payload_decodes_with_unknown_capabilities_and_no_group() -> None:
    intent = codec.decode_intent(OLD_REGISTER)
    assert isinstance(intent, RegisterNode)
    gpu = intent.gpus[0]
    assert (gpu.isolation_capabilities, gpu.interconnect_group, gpu.numa_node) == ((), "", 0)
    assert codec.encode(intent) == OLD_REGISTER  # re-encoded byte for byte: nothing new on the wire


def test_defaults_are_omitted_so_events_keep_their_size() -> None:
    gpu = values.GpuSpec(name="g", capacity=values.Resources(milli_tflops=1))
    encoded = codec.encode(gpu)
    assert b"isolation_capabilities" not in encoded and b"interconnect_group" not in encoded


def test_the_new_fields_round_trip_through_an_event() -> None:
    gpu = values.GpuSpec(name="g", capacity=values.Resources(vram_bytes=1), numa_node=1,
                         isolation_capabilities=("soft", "hard", "partitioned"),
                         interconnect_group="00000000:18:00.0")
    event = NodeRegistered(at=datetime(2026, 1, 1, tzinfo=UTC), node="n", pool="p", gpus=(gpu,))
    assert codec.decode_event(codec.encode(event)) == event


def test_the_capability_literal_lists_exactly_the_isolation_modes() -> None:
    literal = get_args(get_args(values.IsolationCapabilities)[0])[0]
    assert get_args(literal) == values.ISOLATION_MODES


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("isolation_capabilities", ["soft", "exclusive"], "exclusive"),
    ("isolation_capabilities", ["soft", "hard", "shared", "partitioned", "soft"], "isolation_capabilities"),
    ("interconnect_group", "x" * 64, "interconnect_group"),
])
def test_bad_values_are_decode_errors_naming_the_field(field: str, value: object, needle: str) -> None:
    body = msgspec.json.decode(OLD_REGISTER)
    body["gpus"][0][field] = value
    with pytest.raises(codec.DecodeError) as info:
        codec.decode_intent(msgspec.json.encode(body))
    assert needle in str(info.value) and "gpus[0]" in str(info.value)
