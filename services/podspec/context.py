"""Inputs of :func:`services.podspec.compose` besides the Pod: pool defaults and cluster facts.

These are plain values the caller looks up (the webhook from its caches, the CLI from flags or
the running stack), so the parser itself stays pure.
"""

from __future__ import annotations

import msgspec

from events.values import Resources


class PoolDefaults(msgspec.Struct, frozen=True, kw_only=True):
    """The GPUPool fields admission reads (TensorFusion api/v1/gpupool_types.go).

    ``name``: pool used when the pod has no ``gpupool`` annotation (TensorFusion: the pool
    marked ``is-default-pool``). ``default_qos``: ``qosConfig.defaultQoS``. ``local_gpu``:
    ``defaultUsingLocalGPU`` (unset means true in TensorFusion).
    """

    name: str = "default"
    default_qos: str = "medium"
    local_gpu: bool = True


class ComposeContext(msgspec.Struct, frozen=True, kw_only=True):
    """Cluster facts a pure parser cannot look up itself.

    ``model_capacity``: GPU model -> full capacity (``dedicated-gpu``); ``owner_name``: the
    resolved top controller (Deployment for a ReplicaSet) when the caller looked it up;
    ``owner_replicas``: that controller's ``spec.replicas`` / ``parallelism`` (gang size);
    ``native_resources``: device-plugin resource names migrated into ``gpu-count``;
    ``review_uid``: the AdmissionReview UID, the allocation id when the pod has no UID yet
    (the API server assigns UIDs and generated names after mutating admission);
    ``known_pools``: pools the allocator knows (None: do not check);
    ``priority_classes``: PriorityClass name -> value, for a pod that names a class the API server
    has not resolved into ``spec.priority`` (services/podspec/priority.py).
    """

    model_capacity: dict[str, Resources] = {}
    owner_name: str = ""
    owner_replicas: int | None = None
    native_resources: tuple[str, ...] = ("nvidia.com/gpu",)
    review_uid: str = ""
    known_pools: frozenset[str] | None = None
    priority_classes: dict[str, int] = {}
