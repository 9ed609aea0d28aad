"""Readable test data for admission tests: pods, profiles, reviews (TensorFusion's Go fixtures)."""

from __future__ import annotations

from typing import Any

import msgspec

from events.values import AllocationSpec, QuotaSpec
from services.podspec import ComposeContext, PoolDefaults, compose, keys

A = "tensor-fusion.ai/"
MOCK_POOL = PoolDefaults(name="mock", default_qos="medium", local_gpu=True)
GI = 2**30


def a_pod(annotations: dict[str, str] | None = None, *, name: str = "p1", uid: str = "uid-1",
          containers: list[tuple[str, dict[str, Any]]] | None = None, owner: tuple[str, str] | None = None,
          generate_name: str = "", labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A TensorFusion pod; ``annotations`` keys may omit the ``tensor-fusion.ai/`` prefix."""
    meta: dict[str, Any] = {"labels": {keys.ENABLED: "true", **(labels or {})}, "namespace": "default",
                            "annotations": {(k if "/" in k else A + k): v for k, v in (annotations or {}).items()}}
    if name:
        meta["name"] = name
    if uid:
        meta["uid"] = uid
    if generate_name:
        meta["generateName"] = generate_name
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": owner[0], "name": owner[1], "uid": "o1",
                                    "controller": True}]
    items = containers or [("main", {})]
    spec_ = {"containers": [{"name": n, "image": "busybox", "resources": {"limits": lim} if lim else {}}
                            for n, lim in items], **spec}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec_}


def a_profile(spec: dict[str, Any], *, name: str = "prof") -> dict[str, Any]:
    """A WorkloadProfile custom object."""
    return {"apiVersion": "tensor-fusion.ai/v1", "kind": "WorkloadProfile",
            "metadata": {"name": name, "namespace": "default"}, "spec": spec}


def run(pod: dict[str, Any], *, profile: dict[str, Any] | None = None, quota: QuotaSpec | None = None,
        pool: PoolDefaults = MOCK_POOL, context: ComposeContext | None = None) -> AllocationSpec:
    """compose() with the Go suite's default fixture (pool ``mock``, local by default)."""
    return compose(pod, profile=profile, quota_defaults=quota, pool_defaults=pool, context=context)


def sides(spec: AllocationSpec) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(request, limit) as (milli-TFLOPS, milli-percent, bytes) like the spec's req=(tflops, compute, vram)."""
    r, lim = spec.request, spec.limit
    return ((r.milli_tflops, r.compute_milli_percent, r.vram_bytes),
            (lim.milli_tflops, lim.compute_milli_percent, lim.vram_bytes))


def a_review(pod: dict[str, Any] | None, *, uid: str = "rev-1", operation: str = "CREATE",
             dry_run: bool = False, namespace: str = "default") -> bytes:
    """An AdmissionReview v1 request body for ``pod``."""
    return msgspec.json.encode({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"}, "namespace": namespace,
                    "operation": operation, "userInfo": {"username": "test"}, "object": pod,
                    "oldObject": None, "dryRun": dry_run}})
