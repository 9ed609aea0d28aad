"""Kubernetes watches feeding admission: WorkloadProfiles, GPUResourceQuotas and PriorityClasses into
the ClusterView, and GPUShares into share intents.

Quota changes become SetQuota / RemoveQuota intents (intent id ``quota-<ns>-<name>-<resourceVersion>``,
so a re-list publishes duplicates JetStream drops). A namespace's quota is its first
GPUResourceQuota by name (TensorFusion reads the first listed). GPUShare changes become SetShare /
RemoveShare (intent id ``share-<name>-<resourceVersion>``; :class:`ShareTracker` orders parents
before their children and a parent's removal after its children's). Uses
services.shared.kube.watch_objects (resume from resourceVersion, re-list on 410 Gone).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from events import bounds, guard
from events.base import Intent
from events.intents import RemoveQuota, RemoveShare, SetQuota, SetShare
from events.values import ShareSpec
from services.admission.quota import parse_quota
from services.admission.share import parse_share
from services.admission.view import ClusterView
from services.podspec import PodSpecError
from services.shared import kube

GROUP, VERSION = "tensor-fusion.ai", "v1"
SHARE_GROUP, SHARE_VERSION, SHARE_PLURAL = "gpuledger.io", "v1", "gpushares"
"""GPUShare's API group, version and plural (deploy/crds/gpushares.yaml; cluster-scoped)."""
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


class ShareTracker:
    """The GPUShares seen; decides which SetShare/RemoveShare to publish, in an order the allocator
    accepts (pure). The allocator refuses a child whose parent is unknown and the removal of a share
    that is still a parent; a (re-)list reports objects by name, so: until the list is complete
    (``synced``) nothing is published, then parents come first; afterwards a child whose parent was
    never seen waits for it, and a deleted parent's RemoveShare waits for its children's removal.
    A share set only through the API or CLI is unknown here: a child naming it is published at once
    (the allocator decides)."""

    def __init__(self) -> None:
        self.objects: dict[str, ShareSpec] = {}
        """Share name -> its spec, for every GPUShare present (malformed ones left out)."""
        self.published: dict[str, ShareSpec] = {}
        """What this tracker last published per share (a SetShare; removed on RemoveShare)."""
        self.deleted: set[str] = set()
        """Deleted GPUShares whose RemoveShare waits for their children's."""
        self.synced = False
        self.versions: dict[str, str] = {}
        self.present: dict[str, dict[str, Any]] = {}
        """Name -> the GPUShare object as last seen (malformed ones too), for the status writer
        (services.admission.share_status), which also stores the objects its patches answer."""
        self.errors: dict[str, str] = {}
        """Name -> why a present GPUShare cannot be read (PodSpecError's message)."""

    def apply(self, kind: str, obj: dict[str, Any]) -> list[Intent]:
        """Fold one watch event (``SYNCED`` included); returns the intents to publish, in order."""
        if kind == kube.SYNCED:
            self.synced = True
            return self._pending()
        name = _key(obj)[1]
        self.versions[name] = _version(obj)
        if kind == "DELETED":
            self.objects.pop(name, None)
            self.present.pop(name, None)
            self.errors.pop(name, None)
            self.deleted.add(name)
        else:
            self.present[name] = obj
            try:
                share, spec = parse_share(obj)
            except PodSpecError as exc:
                log.warning("bad_share", name=name, field=exc.field, error=str(exc))
                self.errors[name] = str(exc)
                return []
            self.errors.pop(name, None)
            self.objects[share] = spec
            self.deleted.discard(share)
        return self._pending() if self.synced else []

    def _pending(self) -> list[Intent]:
        out: list[Intent] = []
        # sets: parents (and shares without a parent) first, then children whose parent is published
        # or was never a GPUShare (set through the API, or absent: the allocator refuses, naming it)
        for name in sorted(self.objects, key=lambda n: (bool(self.objects[n].parent), n)):
            spec = self.objects[name]
            if self.published.get(name) == spec:
                continue
            if spec.parent and spec.parent in self.objects and spec.parent not in self.published:
                continue  # its parent's SetShare is refused (bad object): wait for a good one
            intent = SetShare(intent_id=f"share-{name}-{self.versions.get(name, '0')}", name=name, spec=spec)
            try:
                guard.check_message(intent)
            except bounds.BoundsError as exc:
                log.warning("bad_share", name=name, field=exc.field, error=str(exc))
                continue
            self.published[name] = spec
            out.append(intent)
        # removals: children before their parent
        parents = {gone.parent for d in self.deleted if (gone := self.published.get(d)) is not None}
        for name in sorted(self.deleted, key=lambda n: (n in parents, n)):
            if self._is_parent(name):
                continue
            self.deleted.discard(name)
            self.published.pop(name, None)
            out.append(RemoveShare(intent_id=f"share-{name}-removed-{self.versions.get(name, '0')}", name=name))
        return out

    def _is_parent(self, name: str) -> bool:
        return any(spec.parent == name for spec in self.objects.values())


async def watch_shares(api: client.ApiClient, *, publish: PublishIntent, tracker: ShareTracker | None = None) -> None:
    """Publish SetShare/RemoveShare for the cluster's GPUShares (cluster-scoped; until cancelled).
    ``tracker`` (shared with the status writer, services.admission.share_status) keeps the objects."""
    tracker = tracker or ShareTracker()
    custom = client.CustomObjectsApi(api)
    lister = functools.partial(custom.list_cluster_custom_object, SHARE_GROUP, SHARE_VERSION, SHARE_PLURAL)
    try:
        async for event in kube.watch_objects(lister):
            for intent in tracker.apply(event.type, event.object):
                await publish(intent)
    except ApiException as exc:
        if exc.status != 404:
            raise
        # the CRD is not installed (an upgrade that did not apply deploy/crds): shares still come from
        # the API and the CLI; the other watches and the webhook keep running
        log.error("gpushare_crd_missing", error="GPUShare (gpuledger.io/v1) is not served; apply deploy/crds")
