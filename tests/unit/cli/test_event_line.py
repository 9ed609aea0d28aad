"""``gpuledger events`` text lines name what an event is about: the pod, or the allocation when the
event carries no pod (a resize), else the namespace, GPU or pool."""

from __future__ import annotations

from typing import Any

from services.cli.events_command import event_line


def _line(**payload: Any) -> list[str]:
    return event_line({"position": 7, "at": "2026-03-01T08:00:00.123Z", **payload}).split("  ")


def test_a_resize_names_its_allocation_not_just_the_namespace() -> None:
    line = _line(type="allocation_resized", allocation_id="team-a/second", namespace="team-a", pool="default")
    assert line == ["7", "2026-03-01 08:00:00", "allocation_resized", "team-a/second"]


def test_a_grant_names_namespace_slash_pod_and_its_node() -> None:
    line = _line(type="allocation_granted", spec={"namespace": "team-a", "pod": "demo", "allocation_id": "uid-1"},
                 node="n1")
    assert line[3:] == ["team-a/demo", "n1"]


def test_events_without_an_allocation_name_their_namespace_gpu_or_pool() -> None:
    assert _line(type="quota_set", namespace="team-a")[3] == "team-a"
    assert _line(type="gpu_phase_changed", gpu="n1-gpu0", node="n1")[3] == "n1-gpu0"
    assert _line(type="pool_configured", pool="default")[3] == "default"
