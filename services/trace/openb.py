"""Loading the Alibaba openb trace (data/openb) as gpuledger intents.

Nodes come from discovery's static importer (``services.discovery.static.load_inventory``).
A pod row maps as: gpu_milli (thousandths of one GPU, clipped to 1000) -> compute share in
milli-percent (×100), num_gpu -> GPU count, gpu_spec ("A|B") -> allowed models, cpu_milli ->
CPU millicores, memory_mib -> bytes. A CPU-only pod (num_gpu 0) becomes a one-GPU request of
zero GPU amount (it takes CPU and memory only; the paper's strategies recognise it), because the
domain requires gpu_count >= 1. creation_time/deletion_time are seconds (empty when absent).
"""

from __future__ import annotations

import csv
from pathlib import Path

import msgspec

from events.intents import RegisterNode
from events.values import AllocationSpec, Resources
from services.discovery.static import load_inventory

DATA = Path(__file__).resolve().parent.parent.parent / "data" / "openb"
NODES_CSV = DATA / "openb_node_list_gpu_node.csv"
PODS_CSV = DATA / "openb_pod_list_default.csv"
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")


class TraceError(ValueError):
    """A malformed pod CSV; the message names the file, line and column."""


class TracePod(msgspec.Struct, frozen=True, kw_only=True):
    """One trace pod: per-GPU ``milli`` (0-1000), ``count`` GPUs (0 = CPU-only), CPU millicores,
    memory bytes, allowed ``models`` and the optional creation/deletion times (seconds)."""

    name: str
    cpu_milli: int
    memory_bytes: int
    count: int
    milli: int
    models: tuple[str, ...] = ()
    qos: str = ""
    created: int | None = None
    deleted: int | None = None

    @property
    def demand(self) -> int:
        """GPU demand in milli-GPU: count × milli."""
        return self.count * self.milli

    def spec(self, *, pool: str, allocation_id: str | None = None, namespace: str = "openb") -> AllocationSpec:
        """The pod as an allocation spec (request = limit; CPU-only: one GPU of zero amount)."""
        share = Resources(compute_milli_percent=self.milli * 100)
        name = allocation_id or self.name
        return AllocationSpec(
            allocation_id=name, namespace=namespace, pod=name, pool=pool, request=share, limit=share,
            gpu_count=max(1, self.count), gpu_models=self.models, cpu_milli=self.cpu_milli,
            memory_bytes=self.memory_bytes, qos="high" if self.qos == "LS" else "medium",
        )


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


def _int(path: Path, line: int, row: dict[str, str], column: str) -> int:
    value = (row.get(column) or "").strip()
    try:
        number = int(float(value)) if value else 0
    except ValueError:
        raise TraceError(f"{path}: line {line}: {column}: {value!r} is not a number") from None
    if number < 0:
        raise TraceError(f"{path}: line {line}: {column}: {value!r} must be >= 0")
    return number


def _time(row: dict[str, str], column: str) -> int | None:
    value = (row.get(column) or "").strip()
    return int(float(value)) if value else None


def trace_pods(path: Path = PODS_CSV) -> list[TracePod]:
    """Every pod of a trace CSV (CPU-only included), in file order. Raises TraceError on bad rows."""
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in POD_COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise TraceError(f"{path}: header: missing columns {missing}")
        out = []
        for line, row in enumerate(reader, start=2):
            count = _int(path, line, row, "num_gpu")
            milli = min(1000, _int(path, line, row, "gpu_milli")) if count else 0
            spec = row.get("gpu_spec") or ""
            out.append(TracePod(
                name=row["name"], cpu_milli=_int(path, line, row, "cpu_milli"),
                memory_bytes=_int(path, line, row, "memory_mib") * 2**20, count=count, milli=milli,
                models=tuple(m for m in spec.split("|") if m), qos=row.get("qos") or "",
                created=_time(row, "creation_time"), deleted=_time(row, "deletion_time"),
            ))
    return out


def pods(path: Path = PODS_CSV, *, pool: str = "default") -> list[AllocationSpec]:
    """GPU pods of a trace CSV as allocation specs (request = limit), in file order; CPU-only skipped."""
    return [p.spec(pool=pool) for p in trace_pods(path) if p.count]
