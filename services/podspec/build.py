"""Assemble the AllocationSpec from the resolved values: ids, workload, attributes, affinity, CPU/memory.

The last step of :func:`services.podspec.compose`; everything here is derived, nothing decided,
except the final check against the contract's bounds (:func:`events.guard.check_message`): a spec
the allocator would refuse is denied here, naming the annotation or Pod field it came from.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec

from events import bounds, guard, names
from events.values import AllocationSpec, NodeAffinity
from services.podspec import keys
from services.podspec.affinity import combine, parse_node_affinity
from services.podspec.context import ComposeContext
from services.podspec.errors import PodSpecError
from services.podspec.gang import gang_attributes, gang_spec
from services.podspec.options import Options
from services.podspec.pod import NativeGpus, containers, cpu_memory, workload_name
from services.podspec.priority import eviction_protection_attributes, read_priority
from services.podspec.profile import Profile, Side
from services.podspec.resources import to_resources


class Resolved(msgspec.Struct, kw_only=True):
    """Everything compose decided: profile, options, native GPUs, count, vendor, indices, sides, QoS."""

    prof: Profile
    opts: Options
    native: NativeGpus
    count: int
    vendor: str
    indices: tuple[int, ...]
    request: Side
    limit: Side
    qos: str


def _inject(annotations: Mapping[str, str], pod: Mapping[str, Any], native: NativeGpus) -> str:
    raw = annotations.get(keys.INJECT_CONTAINER, "")
    names = [n.strip() for n in raw.split(",") if n.strip()]
    if not names:
        app = containers(pod)
        names = [str(app[0].get("name", ""))] if len(app) == 1 else list(native.per_container)
    if not names and len(containers(pod)) > 1:
        raise PodSpecError(
            f"{keys.INJECT_CONTAINER}: inject container has to be specified when Pod containers > 1",
            field=keys.INJECT_CONTAINER,
            value=raw,
        )
    return ",".join(names)


def _affinity(pod: Mapping[str, Any], prof: Profile) -> NodeAffinity | None:
    spec = pod.get("spec") or {}
    own = parse_node_affinity((spec.get("affinity") or {}).get("nodeAffinity"), field="spec.affinity.nodeAffinity")
    selector = spec.get("nodeSelector") if isinstance(spec.get("nodeSelector"), Mapping) else None
    return combine(prof.node_affinity, own, node_selector=selector)


def _attributes(
    pod: Mapping[str, Any],
    annotations: Mapping[str, str],
    *,
    resolved: Resolved,
    workload: str,
    group_key: str,
    context: ComposeContext,
) -> dict[str, str]:
    opts, prof = resolved.opts, resolved.prof
    attributes = opts.attributes(
        inject=_inject(annotations, pod, resolved.native), workload=workload, native=resolved.native
    )
    desired = opts.enabled_replicas if opts.enabled_replicas is not None else prof.replicas
    attributes.update(
        gang_attributes(
            annotations,
            profile_gang=prof.gang,
            group_key=group_key,
            desired=desired if desired is not None else context.owner_replicas,
        )
    )
    if prof.autoscaling_config:
        attributes[keys.AUTOSCALING_CONFIG] = prof.autoscaling_config
    own_split = annotations.get(keys.CONTAINER_GPU_COUNT, "")
    if own_split and keys.CONTAINER_GPU_COUNT not in attributes:
        # TensorFusion's PreBind maps whatever container-gpu-count the pod carries (gpuresources.go)
        attributes[keys.CONTAINER_GPU_COUNT] = own_split
    attributes.update(eviction_protection_attributes(annotations))
    return attributes


_SOURCES = {
    "request.milli_tflops": keys.TFLOPS_REQUEST, "limit.milli_tflops": keys.TFLOPS_LIMIT,
    "request.vram_bytes": keys.VRAM_REQUEST, "limit.vram_bytes": keys.VRAM_LIMIT,
    "request.compute_milli_percent": keys.PERCENT_REQUEST, "limit.compute_milli_percent": keys.PERCENT_LIMIT,
    "allocation_id": "metadata.uid", "namespace": "metadata.namespace", "pod": "metadata.name",
    "workload": keys.WORKLOAD, "pool": keys.POOL, "qos": keys.QOS, "isolation": keys.ISOLATION,
    "gpu_models": keys.GPU_MODEL, "vendor": keys.VENDOR, "gpu_indices": keys.GPU_INDICES, "gpu_count": keys.GPU_COUNT,
    "cpu_milli": "spec.containers[*].resources.requests.cpu",
    "memory_bytes": "spec.containers[*].resources.requests.memory",
    "partition_template": keys.PARTITION_ID, "attributes": "metadata.annotations",
    "node_affinity": "spec.affinity.nodeAffinity", "priority": "spec.priority",
    "gang.quorum": keys.GANG_MIN_MEMBERS, "gang.desired": keys.GANG_DESIRED, "gang.key": keys.GANG_GROUP_KEY,
    "gang.timeout_s": keys.GANG_TIMEOUT,
}
"""Where each AllocationSpec field comes from (an annotation key or a Pod path), for denials."""


def check_bounds(spec: AllocationSpec, annotations: Mapping[str, str]) -> AllocationSpec:
    """``spec`` when within :mod:`events.bounds`; else PodSpecError naming the annotation or Pod field."""
    try:
        return guard.check_message(spec)
    except bounds.BoundsError as exc:
        parts = exc.field.replace("[", ".").split(".")
        source = _SOURCES.get(".".join(parts[:2])) or _SOURCES.get(parts[0]) or f"spec.{exc.field}"
        value = annotations.get(source) or exc.value
        reason = str(exc).split(" - at `", 1)[0].removeprefix("invalid: ")
        raise PodSpecError(
            f"{source}={bounds.echo(value, 80)!r}: outside gpuledger's bounds ({reason})", field=source, value=value
        ) from None


def _check_names(namespace: str, pod: str, *, named: bool) -> None:
    """PodSpecError unless the namespace is a DNS label and the pod name (or its ``generateName``
    prefix) a DNS subdomain, as the API server requires (:mod:`events.names`)."""
    field = "metadata.name" if named else "metadata.generateName"
    invalid = names.problem("namespace", namespace, field="metadata.namespace")
    if invalid:
        raise PodSpecError(invalid, field="metadata.namespace", value=namespace)
    invalid = names.problem("pod", pod, field=field) if pod else None
    if invalid:
        raise PodSpecError(invalid, field=field, value=pod)


UID = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9._]*[A-Za-z0-9])?")
"""What a UID may look like to become an allocation id: a Kubernetes UID is an RFC 4122 UUID; letters,
digits, ``-``, ``.`` and ``_`` are accepted, never ``/`` (the length is the contract's bound)."""


def check_uid(meta: Mapping[str, Any], *, review_uid: str) -> None:
    """Refuse a UID that cannot become an allocation id: the pod's (``metadata.uid``), else the
    AdmissionReview's (``request.uid``), which is the id when present (else ``namespace/name``).

    A UID holding anything but letters, digits, ``-``, ``.``, ``_`` raises PodSpecError naming its
    field: an id with ``/`` would be the ``namespace/name`` id of a pod of another namespace
    (``metadata.uid: "team-b/trainer"`` in namespace team-a claimed team-b's pod's allocation). So
    a ``/`` id always begins with the pod's own namespace.
    """
    field, uid = ("metadata.uid", str(meta["uid"])) if meta.get("uid") else ("request.uid", review_uid)
    if uid and not UID.fullmatch(uid):
        raise PodSpecError(f"{field}={bounds.echo(uid, 80)!r}: not a Kubernetes UID (letters, digits, '-', '.', '_'; "
                           "a '/' would name another pod's allocation id namespace/name)",
                           field=field, value=uid)


def build_spec(
    pod: Mapping[str, Any], *, annotations: Mapping[str, str], resolved: Resolved, context: ComposeContext
) -> AllocationSpec:
    """The AllocationSpec; allocation id = pod UID, else the review UID, else ``namespace/name``."""
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    check_uid(meta, review_uid=context.review_uid)
    uid = str(meta.get("uid") or context.review_uid)
    workload = workload_name(pod, resolved_owner=context.owner_name, suffix=uid.replace("-", ""))
    attributes = _attributes(
        pod, annotations, resolved=resolved, workload=workload, group_key=f"{namespace}/{workload}", context=context
    )
    cpu, memory = cpu_memory(pod)
    pod_name = str(meta.get("name") or meta.get("generateName") or "")
    _check_names(namespace, pod_name, named=bool(meta.get("name")))
    opts = resolved.opts
    spec = AllocationSpec(
        allocation_id=uid or f"{namespace}/{pod_name}",
        namespace=namespace,
        pod=pod_name,
        pool=opts.pool,
        request=to_resources(resolved.request),
        limit=to_resources(resolved.limit),
        workload=workload,
        gpu_count=resolved.count,
        qos=resolved.qos,
        isolation=opts.isolation,
        gpu_models=(opts.gpu_model,) if opts.gpu_model else (),
        vendor=resolved.vendor,
        gpu_indices=resolved.indices,
        node_affinity=_affinity(pod, resolved.prof),
        cpu_milli=cpu,
        memory_bytes=memory,
        partition_template=opts.partition if opts.isolation == "partitioned" else "",
        attributes=attributes,
        priority=read_priority(pod, classes=context.priority_classes),
        gang=gang_spec(attributes),
    )
    return check_bounds(spec, annotations)
