"""docs/deploy.md's walk-through holds, run offline through the real code paths the cluster runs.

The node is labelled exactly as the document's ``kubectl label node`` command says; discovery's
Kubernetes source turns it into RegisterNode; the example GPUResourceQuota becomes SetQuota as the
admission watch parses it; the example pod and WorkloadProfile go through the webhook's parser; the
allocator's ``process`` then decides. The document's claims (40 TFLOPS request, 20Gi VRAM limit, the
profile's model, a grant on that node) are checked against what comes out.
"""

from __future__ import annotations

import datetime as dt
import re
import shlex
from typing import Any

import yaml

from events import decisions, intents
from services.admission.quota import parse_quota
from services.allocator.domain import ClusterState, process
from services.discovery import kubernetes as discovery
from services.discovery.catalog import ModelTable
from services.discovery.inventory import ReportConfig
from services.podspec import compose
from tests.deploy.conftest import DEPLOY, REPO, load_yaml_documents

NOW = dt.datetime(2026, 11, 21, tzinfo=dt.UTC)
GI = 2**30


def _documented_node() -> dict[str, Any]:
    """The Node the walk-through labels, with the labels of its ``kubectl label node`` command."""
    text = (REPO / "docs" / "deploy.md").read_text()
    command = re.search(r"kubectl label node (.+?)\n\s*```", text.replace("\\\n", " "), re.S)
    assert command, "docs/deploy.md no longer shows how to label a node as a GPU node"
    name, *pairs = shlex.split(command[1])
    labels = dict(pair.split("=", 1) for pair in pairs)
    return {"metadata": {"name": name, "labels": labels, "resourceVersion": "1"},
            "spec": {}, "status": {"allocatable": {"cpu": "8", "memory": "32Gi"},
                                   "conditions": [{"type": "Ready", "status": "True"}]}}


def _example(kind: str) -> dict[str, Any]:
    for path in sorted((DEPLOY / "examples").glob("*.yaml")):
        for doc in load_yaml_documents(path):
            if doc["kind"] == kind:
                return doc
    raise AssertionError(f"no {kind} in deploy/examples")


def test_the_example_pod_composes_as_documented() -> None:
    pod = {**_example("Pod"), "metadata": {**_example("Pod")["metadata"], "uid": "uid-1"}}
    spec = compose(pod, profile=_example("WorkloadProfile"), quota_defaults=parse_quota(_example("GPUResourceQuota")))
    assert spec.request.milli_tflops == 40_000, "the pod's tflops-request annotation overrides the profile"
    assert spec.limit.vram_bytes == 20 * GI, "the pod's vram-limit annotation overrides the profile"
    assert spec.request.vram_bytes == 16 * GI and spec.limit.milli_tflops == 100_000, "the rest is the profile's"
    assert spec.gpu_models == ("A100_SXM_80G",) and spec.gpu_count == 1 and spec.qos == "high"


def test_the_walkthrough_pod_is_granted_on_the_labelled_node() -> None:
    node = _documented_node()
    register = discovery.node_report(node, table=ModelTable.load(), config=ReportConfig(source="kubernetes"))
    assert register is not None and register.gpus, "discovery must see the labelled node as a GPU node"
    assert {gpu.model for gpu in register.gpus} == {"A100_SXM_80G"}
    quota = intents.SetQuota(intent_id="quota", namespace="ml-team", spec=parse_quota(_example("GPUResourceQuota")))
    pod = {**_example("Pod"), "metadata": {**_example("Pod")["metadata"], "uid": "uid-1"}}
    spec = compose(pod, profile=_example("WorkloadProfile"), quota_defaults=quota.spec)
    state = ClusterState.empty()
    outcomes: list[Any] = []
    for intent in (register, quota, intents.RequestAllocation(intent_id="request", spec=spec)):
        outcomes = process(state, intent, NOW)
    granted = [e for e in outcomes if isinstance(e, decisions.AllocationGranted)]
    assert granted, f"the walk-through pod was not granted: {outcomes}"
    assert granted[0].node == node["metadata"]["name"]


def test_the_compose_demo_pod_composes() -> None:
    """The pod docs/deploy.md gives for `gpuledger submit` against docker compose parses as documented."""
    text = (REPO / "docs" / "deploy.md").read_text()
    body = re.search(r"cat > demo-pod\.yaml <<'EOF'\n(.*?)\nEOF\n", text, re.S)
    assert body, "docs/deploy.md no longer shows the demo pod"
    spec = compose(yaml.safe_load(body[1]))
    assert (spec.request.milli_tflops, spec.limit.milli_tflops) == (20_000, 40_000)
    assert spec.request.vram_bytes == spec.limit.vram_bytes == 8 * GI
