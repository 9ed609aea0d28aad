"""Pure JSONPatches the binder sends for a granted allocation: pin, then ungate.

Step 1 (pod still gated): required node affinity to the granted node (``matchFields``
``metadata.name In [node]``, ANDed into every existing required term, the only edit Kubernetes
allows on a gated pod's affinity: KEP-3838), ``tensor-fusion.ai/gpu-ids`` and the grant's other
annotations (``effective-hard-sm-percent``, ``container-gpus``). Step 2: remove the
``gpuledger.io/allocation`` gate, guarded by a JSONPatch ``test`` op. Both are empty when already
done, so re-binding is idempotent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from services.admission.book import Grant
from services.admission.patch import Op, map_ops
from services.podspec import keys

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"


def _node_requirement(node: str) -> dict[str, Any]:
    return {"key": "metadata.name", "operator": "In", "values": [node]}


def _affinity_ops(spec: Mapping[str, Any], node: str) -> list[Op]:
    requirement = _node_requirement(node)
    term = {"matchFields": [requirement]}
    affinity = spec.get("affinity")
    if not isinstance(affinity, Mapping):
        return [
            {
                "op": "add",
                "path": "/spec/affinity",
                "value": {"nodeAffinity": {_REQUIRED: {"nodeSelectorTerms": [term]}}},
            }
        ]
    node_affinity = affinity.get("nodeAffinity")
    if not isinstance(node_affinity, Mapping):
        return [
            {"op": "add", "path": "/spec/affinity/nodeAffinity", "value": {_REQUIRED: {"nodeSelectorTerms": [term]}}}
        ]
    terms = (node_affinity.get(_REQUIRED) or {}).get("nodeSelectorTerms") or []
    if not terms:
        return [
            {"op": "add", "path": f"/spec/affinity/nodeAffinity/{_REQUIRED}", "value": {"nodeSelectorTerms": [term]}}
        ]
    ops: list[Op] = []
    for index, existing in enumerate(terms):
        fields = existing.get("matchFields") if isinstance(existing, Mapping) else None
        base = f"/spec/affinity/nodeAffinity/{_REQUIRED}/nodeSelectorTerms/{index}/matchFields"
        if not fields:
            ops.append({"op": "add", "path": base, "value": [requirement]})
        elif requirement not in fields:
            ops.append({"op": "add", "path": f"{base}/-", "value": requirement})
    return ops


def pin_ops(pod: Mapping[str, Any], *, grant: Grant) -> list[Op]:
    """Step 1: node affinity + gpu-ids and the grant's annotations (empty when the pod carries them all)."""
    spec = pod.get("spec") if isinstance(pod.get("spec"), Mapping) else {}
    annotations = (pod.get("metadata") or {}).get("annotations")
    target = {keys.GPU_IDS: ",".join(grant.gpus), **grant.annotations}
    wanted = {k: v for k, v in target.items() if (annotations or {}).get(k) != v}
    ops = map_ops("/metadata/annotations", existing=annotations, changes=wanted)
    return ops + _affinity_ops(spec or {}, grant.node)


def ungate_ops(pod: Mapping[str, Any]) -> list[Op]:
    """Step 2: remove the gpuledger scheduling gate (empty when it is gone already)."""
    gates = (pod.get("spec") or {}).get("schedulingGates") or []
    for index, gate in enumerate(gates):
        if isinstance(gate, Mapping) and gate.get("name") == keys.SCHEDULING_GATE:
            path = f"/spec/schedulingGates/{index}"
            return [
                {"op": "test", "path": f"{path}/name", "value": keys.SCHEDULING_GATE},
                {"op": "remove", "path": path},
            ]
    return []


def is_gated(pod: Mapping[str, Any]) -> bool:
    """True while the pod still carries the gpuledger scheduling gate."""
    return bool(ungate_ops(pod))


def claim_refusal(pod: Mapping[str, Any], owner: tuple[str, str] | None) -> str | None:
    """Why ``pod``, which carries an allocation-id label, may not stand for that allocation; None
    when it may. ``owner`` is the allocation's recorded (namespace, pod): ``spec.namespace`` and
    ``spec.pod`` of its AllocationGranted/Queued/Preempted; None while the binder does not know the
    allocation (then only the label is checked).

    The label is any pod creator's to write, so the pod must be one the webhook admitted, labelled
    ``tensor-fusion.ai/enabled: "true"`` (the webhook sees only those and writes its own id over the
    label), and be the allocation's pod: same namespace, and the name recorded at admission, or, for a
    pod the API server named after admission (``spec.pod`` is then its ``generateName``), the same
    ``generateName`` and a name that starts with it. The words name no allocation id."""
    meta = pod.get("metadata") or {}
    if (meta.get("labels") or {}).get(keys.ENABLED) != "true":
        return f'not labelled {keys.ENABLED}: "true", so gpuledger\'s webhook did not admit it'
    if owner is None:
        return None
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    if namespace != owner[0]:
        return f"the allocation belongs to a pod of namespace {owner[0]!r}"
    if name == owner[1] or (meta.get("generateName") == owner[1] and name.startswith(owner[1])):
        return None
    return f"the allocation belongs to pod {owner[1]!r}"
