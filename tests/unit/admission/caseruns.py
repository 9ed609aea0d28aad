"""Table-test runner for the admission behaviour cases: one Case per row, one generic checker."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from events.values import QuotaSpec
from services.podspec import ComposeContext, PodSpecError, PoolDefaults, annotation_changes, canonical_annotations, keys
from tests.unit.admission.builders import MOCK_POOL, run, sides


@dataclass
class Case:
    """One row: the pod and its inputs, and either the expected outcome or the expected error."""

    id: str
    pod: dict[str, Any]
    profile: dict[str, Any] | None = None
    quota: QuotaSpec | None = None
    pool: PoolDefaults = MOCK_POOL
    context: ComposeContext | None = None
    expect: dict[str, Any] = field(default_factory=dict)
    error: str = ""
    error_field: str = ""


def check(case: Case) -> None:
    """Run compose and assert every expectation the row states."""
    if case.error:
        with pytest.raises(PodSpecError) as caught:
            run(case.pod, profile=case.profile, quota=case.quota, pool=case.pool, context=case.context)
        assert case.error in str(caught.value)
        assert caught.value.field == (case.error_field or caught.value.field)
        assert caught.value.field, "every denial names a field"
        return
    spec = run(case.pod, profile=case.profile, quota=case.quota, pool=case.pool, context=case.context)
    request, limit = sides(spec)
    existing = case.pod["metadata"].get("annotations") or {}
    changes = annotation_changes(spec, existing=existing)
    written = canonical_annotations(spec)
    e = case.expect
    simple = {"req": request, "lim": limit, "count": spec.gpu_count, "qos": spec.qos, "iso": spec.isolation,
              "pool": spec.pool, "workload": spec.workload, "indices": spec.gpu_indices,
              "partition": spec.partition_template, "vendor": spec.vendor, "models": spec.gpu_models,
              "local": spec.attributes[keys.IS_LOCAL_GPU] == "true"}
    for name, actual in simple.items():
        if name in e:
            assert actual == e[name], f"{case.id}: {name} is {actual!r}, expected {e[name]!r}"
    for name, value in e.get("changes", {}).items():
        assert changes.get(name) == value, f"{case.id}: change {name} is {changes.get(name)!r}"
    for name in e.get("unchanged", ()):
        assert name not in changes, f"{case.id}: {name} should produce no op, got {changes[name]!r}"
    for name in e.get("not_written", ()):
        assert name not in written, f"{case.id}: {name} should not be written"
    for name, value in e.get("attrs", {}).items():
        assert spec.attributes.get(name) == value, f"{case.id}: attribute {name} = {spec.attributes.get(name)!r}"
    for name in e.get("no_attrs", ()):
        assert name not in spec.attributes
    if "workload_prefix" in e:
        assert spec.workload.startswith(e["workload_prefix"]) and len(spec.workload) == len(e["workload_prefix"]) + 8
