"""Preemption inputs from the pod: the PriorityClass value and tensor-fusion.ai/eviction-protection."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.values import priority_of
from services.admission.review import review
from services.admission.view import ClusterView
from services.podspec import ComposeContext, PodSpecError, annotation_changes, keys
from tests.unit.admission.builders import MOCK_POOL, a_pod, a_review, run

RES = {"tflops-request": "1", "vram-request": "1Gi"}


def test_priority_comes_from_the_resolved_spec_priority_of_a_named_class() -> None:
    spec = run(a_pod(RES, priorityClassName="batch-high", priority=5000))
    assert spec.priority == 5000 and priority_of(spec) == 5000


def test_a_class_not_resolved_by_the_api_server_is_read_from_the_priority_class_cache() -> None:
    context = ComposeContext(priority_classes={"batch-high": 7000})
    assert run(a_pod(RES, priorityClassName="batch-high"), context=context).priority == 7000
    assert run(a_pod(RES, priorityClassName="unknown"), context=context).priority is None


def test_without_a_class_name_the_qos_decides_even_when_the_plugin_wrote_spec_priority() -> None:
    """Kubernetes' Priority plugin writes spec.priority=0 on every pod without a class: not a priority."""
    spec = run(a_pod({**RES, "qos": "critical"}, priority=0))
    assert spec.priority is None and priority_of(spec) == 100_000


@pytest.mark.parametrize("bad", ["5000", 2**31, True, 1.5])
def test_a_spec_priority_that_is_no_32_bit_integer_is_refused_naming_the_field(bad: object) -> None:
    with pytest.raises(PodSpecError) as caught:
        run(a_pod(RES, priorityClassName="x", priority=bad))
    assert caught.value.field == "spec.priority"


def test_a_class_name_that_is_no_string_is_refused() -> None:
    with pytest.raises(PodSpecError) as caught:
        run(a_pod(RES, priorityClassName=7))
    assert caught.value.field == "spec.priorityClassName"


@pytest.mark.parametrize("raw", ["30m", "1h", "1h30m", "90s", "1.5h", "+2h"])
def test_eviction_protection_is_recorded_as_written_and_left_unchanged_on_the_pod(raw: str) -> None:
    spec = run(a_pod({**RES, "eviction-protection": raw}))
    assert spec.attributes[keys.EVICTION_PROTECTION] == raw
    assert keys.EVICTION_PROTECTION not in annotation_changes(spec, existing={keys.EVICTION_PROTECTION: raw})


@pytest.mark.parametrize("raw", ["", "0", "0s"])
def test_an_empty_or_zero_eviction_protection_protects_nothing(raw: str) -> None:
    assert keys.EVICTION_PROTECTION not in run(a_pod({**RES, "eviction-protection": raw})).attributes


@pytest.mark.parametrize(("raw", "why"), [("30", "needs a unit"), ("half an hour", "not a duration"),
                                          ("-5m", "must not be negative"), ("3000000h", "Go duration"),
                                          ("5d", "not a duration")])
def test_a_bad_eviction_protection_is_denied_naming_the_annotation_and_value(raw: str, why: str) -> None:
    body = review(a_review(a_pod({**RES, "eviction-protection": raw})), view=ClusterView(pool=MOCK_POOL))
    assert not body.allowed and body.code == 400 and body.field == keys.EVICTION_PROTECTION
    assert keys.EVICTION_PROTECTION in body.message and repr(raw) in body.message and why in body.message


def test_the_webhook_resolves_the_class_from_its_view_and_leaves_the_protection_annotation_alone() -> None:
    view = ClusterView(pool=MOCK_POOL, priority_classes={"gold": 900})
    verdict = review(a_review(a_pod({**RES, "eviction-protection": "1h"}, priorityClassName="gold")), view=view)
    assert verdict.allowed and verdict.spec is not None
    assert verdict.spec.priority == 900 and verdict.spec.attributes[keys.EVICTION_PROTECTION] == "1h"
    assert "eviction-protection" not in json.dumps(verdict.patch)


@given(st.integers(min_value=-(2**31), max_value=2**31 - 1))
def test_every_32_bit_priority_survives_the_contract(value: int) -> None:
    spec = run(a_pod(RES, priorityClassName="c", priority=value))
    decoded = msgspec.json.decode(msgspec.json.encode(spec), type=type(spec))
    assert decoded.priority == value == priority_of(decoded)

