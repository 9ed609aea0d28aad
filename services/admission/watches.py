"""Kubernetes watches feeding admission: WorkloadProfiles, GPUResourceQuotas and PriorityClasses into
the ClusterView.

Quota changes become SetQuota / RemoveQuota intents (intent id ``quota-<ns>-<name>-<resourceVersion>``,
so a re-list publishes duplicates JetStream drops). A namespace's quota is its first
GPUResourceQuota by name (TensorFusion reads the first listed). Uses services.shared.kube.watch_objects
(resume from resourceVersion, re-list on 410 Gone).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from kubernetes_asyncio import client

from events import bounds, guard
from events.base import Intent
from events.intents import RemoveQuota, SetQuota
from services.admission.quota import parse_quota
from services.admission.view import ClusterView
from services.podspec import PodSpecError
from services.shared import kube

GROUP, VERSION = "tensor-fusion.ai", "v1"
PublishIntent = Callable[[Intent], Awaitable[object]]
log = structlog.get_logger("gpuledger.admission.watches")


def _lister(api: client.ApiClient, plural: str, namespace: str) -> Callable[..., Awaitable[Any]]:
    custom = client.CustomObjectsApi(api)
    if namespace:
        return functools.partial(custom.list_namespaced_custom_object, GROUP, VERSION, namespace, plural)
    return functools.partial(custom.list_cluster_custom_object, GROUP, VERSION, plural)


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


async def watch_profiles(api: client.ApiClient, *, view: ClusterView, namespace: str = "") -> None:
    """Keep ``view.profiles`` equal to the cluster's WorkloadProfiles (runs until cancelled)."""
    async for event in kube.watch_objects(_lister(api, "workloadprofiles", namespace)):
        if event.type == kube.SYNCED:
            continue
        if event.type == "DELETED":
            view.profiles.pop(_key(event.object), None)
        else:
            view.profiles[_key(event.object)] = event.object


async def watch_priority_classes(api: client.ApiClient, *, view: ClusterView) -> None:
    """Keep ``view.priority_classes`` (name -> ``value``) equal to the cluster's PriorityClasses
    (scheduling.k8s.io/v1, cluster-scoped; a value is immutable once created). Runs until cancelled."""
    scheduling = client.SchedulingV1Api(api)
    async for event in kube.watch_objects(scheduling.list_priority_class):
        if event.type == kube.SYNCED:
            continue
        name = _key(event.object)[1]
        value = event.object.get("value")
        if event.type == "DELETED" or not isinstance(value, int) or isinstance(value, bool):
            view.priority_classes.pop(name, None)
        else:
            view.priority_classes[name] = value


class QuotaTracker:
    """Quota objects per namespace; decides which SetQuota/RemoveQuota to publish (pure)."""

    def __init__(self, view: ClusterView) -> None:
        self.view = view
        self.objects: dict[str, dict[str, dict[str, Any]]] = {}

    def apply(self, kind: str, obj: dict[str, Any]) -> Intent | None:
        """Fold one watch event; returns the intent to publish (None when nothing changed)."""
        namespace, name = _key(obj)
        in_namespace = self.objects.setdefault(namespace, {})
        if kind == "DELETED":
            in_namespace.pop(name, None)
        else:
            in_namespace[name] = obj
        if not in_namespace:
            self.objects.pop(namespace, None)
            self.view.quotas.pop(namespace, None)
            return RemoveQuota(intent_id=f"quota-{namespace}-removed-{_version(obj)}", namespace=namespace)
        first = in_namespace[min(in_namespace)]
        try:
            spec = parse_quota(first)
        except PodSpecError as exc:
            log.warning("bad_quota", namespace=namespace, name=min(in_namespace), error=str(exc))
            return None
        if self.view.quotas.get(namespace) == spec:
            return None
        intent = SetQuota(
            intent_id=f"quota-{namespace}-{min(in_namespace)}-{_version(first)}", namespace=namespace, spec=spec
        )
        try:
            guard.check_message(intent)
        except bounds.BoundsError as exc:
            log.warning("bad_quota", namespace=namespace, name=min(in_namespace), field=exc.field, error=str(exc))
            return None
        self.view.quotas[namespace] = spec
        return intent


def _version(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "0")


async def watch_quotas(
    api: client.ApiClient, *, view: ClusterView, publish: PublishIntent, namespace: str = "",
    tracker: QuotaTracker | None = None,
) -> None:
    """Mirror GPUResourceQuotas into ``view.quotas`` and publish SetQuota/RemoveQuota (until cancelled).
    ``tracker`` (shared with the status writer, services.admission.quota_sync) keeps the objects."""
    tracker = tracker or QuotaTracker(view)
    async for event in kube.watch_objects(_lister(api, "gpuresourcequotas", namespace)):
        if event.type == kube.SYNCED:
            continue
        intent = tracker.apply(event.type, event.object)
        if intent is not None:
            await publish(intent)
