"""GPUShare objects -> SetShare/RemoveShare (services.admission.share, watches.ShareTracker): the
example of deploy/examples parses, malformed objects are refused naming the path, and the tracker
publishes parents before children and a parent's removal after its children's."""

from __future__ import annotations

from typing import Any

import pytest

from events import intents
from events.values import ShareAmount
from services.admission.share import parse_share
from services.admission.watches import ShareTracker
from services.podspec import PodSpecError
from services.shared import kube
from tests.deploy.conftest import DEPLOY, load_yaml_documents


def _share(name: str, version: int = 1, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "gpuledger.io/v1", "kind": "GPUShare",
            "metadata": {"name": name, "resourceVersion": str(version)}, "spec": spec}


def test_the_documented_example_parses() -> None:
    docs = [d for d in load_yaml_documents(DEPLOY / "examples" / "15-gpushare.yaml") if d["kind"] == "GPUShare"]
    parsed = dict(parse_share(d) for d in docs)
    vision = parsed["vision"]
    assert vision.parent == "research" and vision.namespaces == ("ml-team",) and vision.weight == 2
    (terms,) = vision.pools
    assert terms.guaranteed == ShareAmount(milli_tflops=400_000, vram_bytes=320 * 2**30, gpus=4)
    assert terms.borrowing_limit == ShareAmount(gpus=2)
    assert terms.lending_limit == ShareAmount(milli_tflops=200_000, vram_bytes=160 * 2**30, gpus=2)
    assert parsed["research"].pools[0].borrowing_limit is None


@pytest.mark.parametrize(("spec", "field"), [
    ({"weight": 0}, "spec.weight"), ({"weight": "2"}, "spec.weight"),
    ({"namespaces": "ml"}, "spec.namespaces"), ({"namespaces": ["ML_team"]}, "spec.namespaces.0"),
    ({"parent": "Dept"}, "spec.parent"), ({"pools": [{"guaranteed": {}}]}, "spec.pools.0.pool"),
    ({"pools": [{"pool": "p", "guaranteed": {"tflops": "-1"}}]}, "spec.pools.0.guaranteed.tflops"),
    ({"pools": [{"pool": "p", "guaranteed": {"vram": "lots"}}]}, "spec.pools.0.guaranteed.vram"),
    ({"pools": [{"pool": "p", "lendingLimit": {"gpus": 1.5}}]}, "spec.pools.0.lendingLimit.gpus"),
    ({"pools": [{"pool": "p", "guaranteed": {"cpu": 1}}]}, "spec.pools.0.guaranteed.cpu"),
    ({"pool": []}, "spec.pool"),
])
def test_a_malformed_object_is_refused_naming_the_path(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(PodSpecError) as caught:
        parse_share(_share("team", **spec))
    assert caught.value.field == field


def _names(published: list[Any]) -> list[tuple[str, str]]:
    return [(type(i).__name__, i.name) for i in published]


def test_the_first_list_publishes_parents_first_then_each_change() -> None:
    tracker = ShareTracker()
    assert tracker.apply("ADDED", _share("a-team", parent="z-dept", namespaces=["a"])) == []  # listed first
    assert tracker.apply("ADDED", _share("z-dept")) == []
    assert tracker.apply("ADDED", _share("bad", weight=0)) == []  # logged, never published
    first = tracker.apply(kube.SYNCED, {})
    assert _names(first) == [("SetShare", "z-dept"), ("SetShare", "a-team")]
    assert first[1].intent_id == "share-a-team-1"
    assert tracker.apply("MODIFIED", _share("a-team", 2, parent="z-dept", namespaces=["a"])) == []  # unchanged
    changed = tracker.apply("MODIFIED", _share("a-team", 3, parent="z-dept", namespaces=["a", "b"]))
    assert _names(changed) == [("SetShare", "a-team")] and changed[0].spec.namespaces == ("a", "b")
    assert tracker.apply(kube.SYNCED, {}) == []  # a re-list of the same objects publishes nothing


def test_a_parent_deleted_before_its_children_is_removed_after_them() -> None:
    tracker = ShareTracker()
    for obj in (_share("dept"), _share("t1", parent="dept", namespaces=["a"]),
                _share("t2", parent="dept", namespaces=["b"])):
        tracker.apply("ADDED", obj)
    tracker.apply(kube.SYNCED, {})
    assert tracker.apply("DELETED", _share("dept", 5)) == []  # still t1's and t2's parent
    assert _names(tracker.apply("DELETED", _share("t1", 6))) == [("RemoveShare", "t1")]
    last = tracker.apply("DELETED", _share("t2", 7))
    assert _names(last) == [("RemoveShare", "t2"), ("RemoveShare", "dept")]
    assert isinstance(last[1], intents.RemoveShare) and last[1].intent_id == "share-dept-removed-5"
