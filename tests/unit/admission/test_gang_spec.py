"""The gang stamped on a pod becomes ``AllocationSpec.gang`` (key, quorum, desired, timeout in whole seconds)."""

from __future__ import annotations

import pytest

from events.values import GangSpec
from services.podspec import compose, keys
from services.podspec.context import ComposeContext
from services.podspec.errors import PodSpecError
from services.podspec.gang import gang_attributes, gang_spec


@pytest.mark.parametrize(("timeout", "seconds"), [("", 0), ("0s", 0), ("1500ms", 2), ("5m", 300), ("1h30m", 5400)])
def test_the_stamped_gang_is_the_contracts_gang(timeout: str, seconds: int) -> None:
    annotations = {keys.GANG_ENABLED: "true", keys.GANG_MIN_MEMBERS: "2"}
    if timeout:
        annotations[keys.GANG_TIMEOUT] = timeout
    stamped = gang_attributes(annotations, profile_gang=None, desired=4, group_key="team-a/trainer")
    assert gang_spec(stamped) == GangSpec(key="team-a/trainer", quorum=2, desired=4, timeout_s=seconds)


def test_no_gang_without_the_stamp() -> None:
    assert gang_spec({}) is None


def test_a_gang_above_the_bound_is_denied_naming_the_annotation() -> None:
    annotations = {"tensor-fusion.ai/tflops-request": "10", "tensor-fusion.ai/vram-request": "1Gi",
                   keys.GANG_ENABLED: "true", keys.GANG_MIN_MEMBERS: "2000"}
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "annotations": annotations,
                        "labels": {"tensor-fusion.ai/enabled": "true"}},
           "spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    with pytest.raises(PodSpecError) as denied:
        compose(pod, context=ComposeContext(review_uid="r"))
    assert denied.value.field == keys.GANG_MIN_MEMBERS and "1024" in str(denied.value)


@pytest.mark.parametrize("timeout", ["100ms", "999ms", "0.5s", "1ns"])
def test_a_timeout_below_a_second_is_refused_naming_the_annotation(timeout: str) -> None:
    annotations = {keys.GANG_ENABLED: "true", keys.GANG_MIN_MEMBERS: "2", keys.GANG_TIMEOUT: timeout}
    with pytest.raises(PodSpecError) as refused:
        gang_attributes(annotations, profile_gang=None, desired=4, group_key="team-a/trainer")
    assert refused.value.field == keys.GANG_TIMEOUT and "resolution of 1s" in str(refused.value)
