"""Pure AdmissionReview handling: request bytes -> Verdict (allow/deny, JSONPatch, the spec to publish).

Accepts ``admission.k8s.io/v1`` (and v1beta1) reviews and answers with the same apiVersion.
Never raises: undecodable input (invalid UTF-8, named by byte position; JSON nested deeper than
:data:`MAX_REVIEW_DEPTH`, refused before the decoder recurses) is denied with code 400, bad
TensorFusion annotations with 400 and a message naming the key and value (TensorFusion answers
500). Pods without the label ``tensor-fusion.ai/enabled: "true"`` and non-CREATE operations are allowed unchanged.
An admitted pod also gets the device skeleton of its pool's ``enforcement``
(services/admission/device_patch.py, docs/runtime.md); until the view's event replay has caught up
(``ClusterView.replayed``) reviews are denied with 503.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import msgspec

from events import bounds, guard
from events.values import AllocationSpec
from services.admission.device_patch import skeleton_ops
from services.admission.patch import build_patch
from services.admission.view import ClusterView
from services.podspec import PodSpecError, annotation_notes, compose, keys
from services.podspec.device_plan import ENFORCEMENT_KEY, device_plan

_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")

MAX_REVIEW_DEPTH = 128
"""Deepest JSON nesting of an AdmissionReview (a Pod with managed fields and affinity nests ~25)."""


class Verdict(msgspec.Struct, kw_only=True):
    """The outcome of one review. ``spec`` is set when a RequestAllocation must be published
    (never for dryRun); ``field`` names the offending key of a denial; ``warnings`` go back in the
    response's ``warnings`` (kubectl prints them): TensorFusion annotations gpuledger ignores."""

    uid: str = ""
    api_version: str = "admission.k8s.io/v1"
    allowed: bool = True
    code: int = 200
    message: str = ""
    field: str = ""
    patch: list[dict[str, Any]] = []
    spec: AllocationSpec | None = None
    dry_run: bool = False
    warnings: list[str] = []


def _decode(body: bytes) -> Mapping[str, Any]:
    guard.check_utf8(body)
    guard.check_depth(body, MAX_REVIEW_DEPTH)
    review = msgspec.json.decode(body)
    if not isinstance(review, Mapping) or not isinstance(review.get("request"), Mapping):
        raise ValueError("body is not an AdmissionReview with a request")
    return review


def _pod(request: Mapping[str, Any]) -> dict[str, Any]:
    obj = request.get("object")
    if not isinstance(obj, Mapping) or not isinstance(obj.get("metadata") or {}, Mapping):
        raise ValueError("request.object is not a Pod object")
    pod = dict(obj)
    meta = dict(pod.get("metadata") or {})
    meta["namespace"] = meta.get("namespace") or request.get("namespace") or "default"
    pod["metadata"] = meta
    return pod


def _is_gpuledger_pod(pod: Mapping[str, Any]) -> bool:
    labels = pod["metadata"].get("labels")
    return isinstance(labels, Mapping) and labels.get(keys.ENABLED) == "true"


def review(body: bytes, *, view: ClusterView) -> Verdict:
    """Decide one AdmissionReview; every outcome is a Verdict with a message."""
    try:
        decoded = _decode(body)
    except (msgspec.DecodeError, ValueError, RecursionError) as exc:  # BoundsError is a ValueError
        return Verdict(allowed=False, code=400, message=f"cannot decode AdmissionReview: {bounds.echo(str(exc), 512)}")
    request = decoded["request"]
    version = decoded.get("apiVersion")
    verdict = Verdict(
        uid=str(request.get("uid") or ""),
        dry_run=request.get("dryRun") is True,
        api_version=version if version in _VERSIONS else "admission.k8s.io/v1",
    )
    try:
        pod = _pod(request)
    except ValueError as exc:
        return _deny(verdict, 400, str(exc), field="request.object")
    kind = request.get("kind") if isinstance(request.get("kind"), Mapping) else {}
    if request.get("operation") != "CREATE" or kind.get("kind", "Pod") != "Pod":
        verdict.message = "not a Pod CREATE, skipped"
        return verdict
    if not _is_gpuledger_pod(pod):
        verdict.message = "non tensor fusion pod, skipped"
        return verdict
    if not view.replayed:
        return _deny(verdict, 503, "gpuledger admission is still reading its event log (the pools' enforcement "
                     "is not known yet); retry in a few seconds", field="events")
    return _admit(verdict, pod, view=view)


def _admit(verdict: Verdict, pod: dict[str, Any], *, view: ClusterView) -> Verdict:
    meta = pod["metadata"]
    annotations = meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}
    profile_name = str(annotations.get(keys.WORKLOAD_PROFILE) or "")
    try:
        spec = compose(
            pod,
            profile=view.profiles.get((meta["namespace"], profile_name)),
            quota_defaults=view.quotas.get(meta["namespace"]),
            pool_defaults=view.pool,
            context=view.context(review_uid=verdict.uid),
        )
        enforcement = view.enforcement.get(spec.pool, "none")
        spec = msgspec.structs.replace(spec, attributes={**spec.attributes, ENFORCEMENT_KEY: enforcement})
        plan = device_plan(spec, enforcement=enforcement)
        if plan.problems:  # a container map whose annotations the API server would refuse: say so now
            return _deny(verdict, 400, plan.problems[0], field=keys.CONTAINER_GPU_COUNT)
        verdict.patch = build_patch(pod, spec=spec, native_resources=view.native_resources,
                                    extra_annotations=plan.annotations) + skeleton_ops(pod, plan)
        verdict.warnings = list(annotation_notes(pod))
    except PodSpecError as exc:
        return _deny(verdict, 400, str(exc), field=exc.field)
    except (TypeError, AttributeError, KeyError) as exc:
        return _deny(verdict, 400, f"malformed Pod object: {exc!r}", field="request.object")
    verdict.message = f"gpuledger: allocation {spec.allocation_id} requested"
    verdict.spec = None if verdict.dry_run else spec
    return verdict


def _deny(verdict: Verdict, code: int, message: str, *, field: str) -> Verdict:
    verdict.allowed, verdict.code, verdict.message, verdict.field = False, code, message, field
    verdict.patch, verdict.spec = [], None
    return verdict


def response_body(verdict: Verdict) -> bytes:
    """The AdmissionReview response JSON (patch base64-encoded, present only when non-empty)."""
    response: dict[str, Any] = {
        "uid": verdict.uid,
        "allowed": verdict.allowed,
        "status": {"metadata": {}, "code": verdict.code, "message": verdict.message},
    }
    if verdict.warnings:
        response["warnings"] = verdict.warnings
    if verdict.allowed and verdict.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(msgspec.json.encode(verdict.patch)).decode()
    return msgspec.json.encode({"apiVersion": verdict.api_version, "kind": "AdmissionReview", "response": response})
