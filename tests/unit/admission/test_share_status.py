"""The GPUShare status patch built from the allocator's share document (pure), checked against the
CRD's status schema."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from services.admission.share import parse_share
from services.admission.share_status import spec_in_force, status_patch
from services.admission.watches import ShareTracker
from tests.deploy import crdschema
from tests.deploy.conftest import load_crds

T0, T1 = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
FIGURE = {"tflops": "100", "vram": "16Gi", "gpus": 2}
ZERO = {"tflops": "0", "vram": "0", "gpus": 0}
OBJ: dict[str, Any] = {"apiVersion": "gpuledger.io/v1", "kind": "GPUShare", "metadata": {"name": "train"},
                       "spec": {"namespaces": ["team-a"], "weight": 2,
                                "pools": [{"pool": "default", "guaranteed": {"tflops": "100", "vram": "16Gi",
                                                                             "gpus": 2},
                                           "borrowingLimit": {"gpus": 1}}]}}
SPEC = {"namespaces": ["team-a"], "parent": "", "weight": 2,
        "pools": [{"pool": "default", "guaranteed": {"tflops": "100", "vram": "16Gi", "gpus": 2},
                   "borrowing_limit": {"tflops": None, "vram": None, "gpus": 1}, "lending_limit": None}]}


def _doc(standing: str = "below", used: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
    return {"name": "train", "spec": {**SPEC, **spec},
            "pools": [{"pool": "default", "guaranteed": FIGURE, "borrowing_limit": {"gpus": 1}, "lending_limit": None,
                       "used": used or ZERO, "borrowed": ZERO, "lent": ZERO, "fair_share": FIGURE,
                       "below_guarantee": [], "above_guarantee": [], "standing": standing, "waiting": 0}]}


def _apply(obj: dict[str, Any], patch: dict[str, Any] | None) -> dict[str, Any]:
    assert patch is not None
    return {**obj, "status": {**obj.get("status", {}), **patch["status"]}}


def _wanted() -> Any:
    return parse_share(OBJ)[1]


def test_first_status_holds_the_allocators_figures_per_pool_and_ready() -> None:
    used = {"tflops": "150", "vram": "3Gi", "gpus": 3}
    patch = status_patch(OBJ, _doc("over", used), now=T0, wanted=_wanted())
    assert patch == {"status": {
        "pools": [{"pool": "default", "guaranteed": FIGURE, "used": used, "borrowed": ZERO, "lent": ZERO,
                   "standing": "Over"}],
        "conditions": [{"type": "Ready", "status": "True", "reason": "InForce",
                        "message": "in force in 1 pool; over its guarantee (borrowing) in default",
                        "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        "lastUpdateTime": "2026-01-01T00:00:00Z"}}
    validator = crdschema.crd_validators(load_crds())[("gpuledger.io/v1", "GPUShare")]
    assert crdschema.errors_of(validator, _apply(OBJ, patch)) == []


def test_an_unchanged_status_is_not_written_again() -> None:
    obj = _apply(OBJ, status_patch(OBJ, _doc(), now=T0))
    assert status_patch(obj, _doc(), now=T1, wanted=_wanted()) is None
    changed = status_patch(obj, _doc(used={"tflops": "50", "vram": "1Gi", "gpus": 1}), now=T1)
    assert changed is not None and changed["status"]["pools"][0]["used"]["gpus"] == 1
    assert changed["status"]["lastUpdateTime"] == "2026-01-02T00:00:00Z"


def test_transition_time_moves_only_with_the_condition_status() -> None:
    obj = _apply(OBJ, status_patch(OBJ, _doc("below"), now=T0))
    moved = _apply(obj, status_patch(obj, _doc("over"), now=T1))  # another message, still True
    [ready] = moved["status"]["conditions"]
    assert (ready["status"], ready["lastTransitionTime"]) == ("True", "2026-01-01T00:00:00Z")
    assert "borrowing" in ready["message"] and moved["status"]["pools"][0]["standing"] == "Over"
    gone = status_patch(moved, None, now=T1)  # the allocator no longer holds it
    assert gone is not None and gone["status"]["pools"] == []
    [ready] = gone["status"]["conditions"]
    assert (ready["status"], ready["reason"], ready["lastTransitionTime"]) == (
        "False", "NotInForce", "2026-01-02T00:00:00Z")


def test_a_spec_the_allocator_does_not_hold_or_cannot_read_is_not_ready() -> None:
    assert spec_in_force("train", _doc()) == _wanted()
    patch = status_patch(OBJ, _doc(weight=1), now=T0, wanted=_wanted())  # the change to weight 2 refused
    assert patch is not None and patch["status"]["conditions"][0]["reason"] == "SpecNotInForce"
    assert patch["status"]["pools"][0]["standing"] == "Below"  # the figures of the spec in force
    bad = status_patch(OBJ, None, now=T0, error="spec.weight=0: must be an integer from 1 to 1000")
    assert bad is not None
    [ready] = bad["status"]["conditions"]
    assert (ready["status"], ready["reason"]) == ("False", "Invalid") and "spec.weight=0" in ready["message"]


def test_other_conditions_are_kept() -> None:
    foreign = {"type": "Synced", "status": "True"}
    patch = status_patch({**OBJ, "status": {"conditions": [foreign]}}, _doc(), now=T0)
    assert patch is not None and patch["status"]["conditions"][1] == foreign


def test_the_tracker_keeps_every_present_object_and_why_one_cannot_be_read() -> None:
    tracker = ShareTracker()
    bad = {"metadata": {"name": "bad"}, "spec": {"weight": 0}}
    tracker.apply("ADDED", OBJ)
    tracker.apply("ADDED", bad)
    assert set(tracker.present) == {"train", "bad"} and set(tracker.errors) == {"bad"}
    assert "spec.weight" in tracker.errors["bad"]
    tracker.apply("MODIFIED", {**bad, "spec": {"weight": 1}})
    tracker.apply("DELETED", OBJ)
    assert set(tracker.present) == {"bad"} and tracker.errors == {}
