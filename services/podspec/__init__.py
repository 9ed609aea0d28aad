"""Pure Pod parser: TensorFusion annotations + WorkloadProfile + defaults -> events.values.AllocationSpec.

Shared by the admission webhook, the allocator's simulate endpoint and the CLI (``submit``,
``simulate``), so it imports only ``events``, msgspec and the standard library. Entry points:
:func:`compose` (raises :class:`PodSpecError` naming the annotation and value; an unknown
``tensor-fusion.ai/*`` key is refused), :func:`annotation_notes` (the TensorFusion keys it
ignores, for warnings) and the
canonical-annotation writer :func:`canonical_annotations` / :func:`annotation_changes`;
:func:`pod_from_manifest` turns a Deployment/Job/... into the pod its controller would create.
"""

from __future__ import annotations

from services.podspec import keys
from services.podspec.canonical import annotation_changes, canonical_annotations, canonical_labels
from services.podspec.compose import annotation_notes, compose
from services.podspec.context import ComposeContext, PoolDefaults
from services.podspec.errors import PodSpecError
from services.podspec.manifest import pod_from_manifest, workload_replicas
from services.podspec.profile import parse_profile

__all__ = [
    "ComposeContext",
    "PodSpecError",
    "PoolDefaults",
    "annotation_changes",
    "annotation_notes",
    "canonical_annotations",
    "canonical_labels",
    "compose",
    "keys",
    "parse_profile",
    "pod_from_manifest",
    "workload_replicas",
]
