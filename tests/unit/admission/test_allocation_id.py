"""An allocation id never names a pod of another namespace (issue 28 item 4): it is the pod's UID,
else the review's, else ``namespace/name``, and a UID with a ``/`` (or anything a Kubernetes UID
cannot hold) is refused naming its field, in the webhook, ``submit`` and ``POST /api/v1/allocations``
alike (they all compose through services.podspec)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.podspec import ComposeContext, PodSpecError, compose
from services.podspec.build import UID
from tests.unit.admission.builders import MOCK_POOL, a_pod

RES = {"tflops-request": "1", "vram-request": "1Gi"}


def _in(namespace: str, *, uid: str, name: str = "p1") -> dict[str, Any]:
    pod = a_pod(RES, uid=uid, name=name)
    pod["metadata"]["namespace"] = namespace
    return pod


@given(other=st.from_regex(r"[a-z0-9]{1,20}", fullmatch=True), name=st.from_regex(r"[a-z0-9]{1,20}", fullmatch=True),
       field=st.sampled_from(["metadata.uid", "request.uid"]))
def test_a_uid_shaped_like_another_namespaces_pod_is_refused_naming_its_field(other: str, name: str,
                                                                              field: str) -> None:
    squat = f"{other}/{name}"
    pod = _in("team-a", uid=squat if field == "metadata.uid" else "")
    with pytest.raises(PodSpecError) as refused:
        review_uid = squat if field == "request.uid" else ""
        compose(pod, pool_defaults=MOCK_POOL, context=ComposeContext(review_uid=review_uid))
    assert refused.value.field == field and refused.value.value == squat


@given(uid=st.from_regex(UID, fullmatch=True))
def test_a_kubernetes_uid_is_the_allocation_id(uid: str) -> None:
    assert compose(_in("team-a", uid=uid), pool_defaults=MOCK_POOL).allocation_id == uid


def test_without_a_uid_the_id_is_the_pods_own_namespace_and_name() -> None:
    spec = compose(_in("team-a", uid="", name="trainer"), pool_defaults=MOCK_POOL)
    assert spec.allocation_id == "team-a/trainer"
    with pytest.raises(PodSpecError, match=r"^metadata\.uid="):
        compose(_in("team-a", uid="uid\n1"), pool_defaults=MOCK_POOL)
