"""The hostile corpus and arbitrary input at the codec: one DecodeError naming the field, nothing else."""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from events import codec, guard
from tests.corpus.bad_intents import BAD_INTENTS, BadIntent, pool, quota, register, release, request


@pytest.mark.parametrize("bad", BAD_INTENTS, ids=[b.name for b in BAD_INTENTS])
def test_every_corpus_payload_is_one_decode_error_naming_its_field(bad: BadIntent) -> None:
    with pytest.raises(codec.DecodeError) as info:
        codec.decode_intent(bad.data)
    error = info.value
    assert error.field == bad.field
    assert str(error).startswith(("invalid intent", "malformed intent"))
    assert len(str(error).encode()) < 2048 and len(error.value.encode()) <= 256


def test_the_corpus_differs_from_a_valid_intent_only_in_the_bad_part() -> None:
    for make in (request, register, quota, pool, release):
        assert codec.decode_intent(msgspec.json.encode(make("valid")))


_scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, 1, -1, 2**31, 2**63 - 1, 2**63, 2**64, 2**42, 2**42 + 1, 10**10 + 1]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=40), st.sampled_from(["x" * 600, "é" * 300]),
)
_json = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            out += _paths(value, (*prefix, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out += _paths(value, (*prefix, index))
    return out


@st.composite
def _intent_shaped(draw: st.DrawFn) -> bytes:
    payload = copy.deepcopy(draw(st.sampled_from([request("h"), register("h"), quota("h"), pool("h"), release("h")])))
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(payload)
        path = draw(st.sampled_from(paths))
        node = payload
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = draw(_json)
    return msgspec.json.encode(payload)


def _deep(draw_depth: int) -> bytes:
    return b'{"type":"request_allocation","x":' + b"[" * draw_depth + b"]" * draw_depth + b"}"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_intent_shaped(), st.binary(max_size=200), st.integers(0, 3000).map(_deep)))
def test_any_intent_shaped_input_decodes_within_bounds_or_is_one_decode_error(data: bytes) -> None:
    try:
        intent = codec.decode_intent(data)
    except codec.DecodeError as exc:
        assert isinstance(exc.field, str) and isinstance(exc.value, str)
        return
    assert guard.check_message(intent) is intent


_event_shaped = st.fixed_dictionaries(
    {"type": st.sampled_from(["node_removed", "allocation_granted", "intent_rejected", "x"])},
    optional={"schema_version": _json, "at": st.one_of(st.just("2026-01-01T00:00:00Z"), _json), "node": _json,
              "pool": _json, "spec": _json},
).map(msgspec.json.encode)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_event_shaped, st.binary(max_size=100), st.integers(0, 3000).map(_deep),
                 st.sampled_from([b'{"type":"node_removed","node":"\xe9t\xe9"}',
                                  b'{"type":"node_removed","schema_version":-1000000000000}'])))
def test_any_event_shaped_input_decodes_or_is_one_decode_error(data: bytes) -> None:
    """Readers of GPULEDGER_EVENTS (admission, autoscaler) skip what does not decode; nothing else escapes."""
    try:
        event = codec.decode_event(data)
    except codec.DecodeError as exc:
        assert str(exc).startswith(("malformed event", "invalid event"))
        return
    assert codec.tag_of(event) in data.decode()


@pytest.mark.parametrize("spec", [None, [], "x", 3, {"request": None}])
def test_a_version_0_grant_of_any_shape_is_a_decode_error_not_a_crash(spec: object) -> None:
    """The version-0 upcaster met ``"spec": null`` (found by the fuzz above) and raised AttributeError."""
    payload = {"type": "allocation_granted", "schema_version": 0, "spec": spec, "node": None, "gpu_names": 5}
    with pytest.raises(codec.DecodeError):
        codec.decode_event(json.dumps(payload))
