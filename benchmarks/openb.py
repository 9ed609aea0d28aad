"""Loading the Alibaba openb trace (data/openb) as gpuledger intents, for benchmarks and experiments.

Nodes come from discovery's static importer (``services.discovery.static.load_inventory``);
pods map as: gpu_milli (thousandths of one GPU) -> compute share in milli-percent (×100),
num_gpu -> GPU count, gpu_spec ("A|B") -> allowed models, cpu_milli -> CPU millicores,
memory_mib -> bytes. CPU-only pods (num_gpu 0) are skipped.
"""

from __future__ import annotations

import csv
from pathlib import Path

import msgspec

from events.intents import RegisterNode
from events.values import AllocationSpec, Resources
from services.discovery.static import load_inventory

DATA = Path(__file__).resolve().parent.parent / "data" / "openb"
NODES_CSV = DATA / "openb_node_list_gpu_node.csv"
PODS_CSV = DATA / "openb_pod_list_default.csv"


def nodes(path: Path = NODES_CSV, *, pool: str = "default", replicas: int = 1) -> list[RegisterNode]:
    """The trace's nodes as RegisterNode intents, replicated ``replicas`` times (suffix -rK)."""
    base = load_inventory(path, pool=pool)
    if replicas == 1:
        return base
    out = []
    for r in range(replicas):
        for intent in base:
            gpus = tuple(msgspec.structs.replace(g, name=f"{g.name}-r{r}", uuid="") for g in intent.gpus)
            out.append(msgspec.structs.replace(intent, intent_id=f"{intent.intent_id}-r{r}",
                                               node=f"{intent.node}-r{r}", gpus=gpus))
    return out


def pods(path: Path = PODS_CSV, *, pool: str = "default") -> list[AllocationSpec]:
    """GPU pods of a trace CSV as allocation specs (request = limit), in file order."""
    out = []
    with path.open() as handle:
        for row in csv.DictReader(handle):
            count = int(row["num_gpu"])
            if count == 0:
                continue
            share = Resources(compute_milli_percent=int(row["gpu_milli"]) * 100)
            spec = row.get("gpu_spec") or ""
            out.append(AllocationSpec(
                allocation_id=row["name"], namespace="openb", pod=row["name"], pool=pool, request=share,
                limit=share, gpu_count=count, gpu_models=tuple(m for m in spec.split("|") if m),
                cpu_milli=int(row["cpu_milli"]), memory_bytes=int(row["memory_mib"]) * 2**20,
                qos="high" if row.get("qos") == "LS" else "medium",
            ))
    return out
