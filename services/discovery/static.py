"""Static source: a YAML inventory file, or an Alibaba-style node CSV, -> RegisterNode intents.

YAML format (documented in docs/discovery.md)::

    pool: default            # optional: pool of nodes that name none
    nodes:
      - name: node-a         # required, unique
        pool: training       # optional
        cpu: "64"            # optional allocatable CPU (quantity); memory: "256Gi" likewise
        labels: {zone: a}    # optional node labels (for pod node affinity)
        schedulable: true    # optional
        gpus:                # groups; indices continue across groups
          - {model: A100_SXM_80G, count: 8}            # capacity from the model table
          - {model: L4, vram: 24Gi, tflops: "121", uuids: [GPU-1], numa_nodes: [0]}
          - {model: H100_SXM, count: 2, numa_nodes: [0, 1], interconnect_groups: [nvl0, nvl0],
             isolation_capabilities: [shared, soft, hard, partitioned]}

CSV (cluster-trace-gpu-v2023 ``openb_node_list_gpu_node.csv``): header ``sn,cpu_milli,memory_mib,
gpu,model``, optionally also ``numa_nodes``, ``interconnect_groups`` (space-separated, one per GPU)
and ``isolation_capabilities`` (space-separated modes). Bad input raises :class:`InventoryError`
naming the file, the entry and the field; so does a model the model table does not know, naming the
closest known ones, unless a YAML entry gives both ``tflops`` and ``vram``. Intent ids are content
hashes, so loading the same file twice registers nothing new.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import msgspec
import yaml

from events import bounds, names, quantity
from events.intents import RegisterNode
from events.values import ISOLATION_MODES, IsolationCapabilities
from services.discovery.catalog import ModelTable
from services.discovery.inventory import GpuReading, ReportConfig, build_gpus, finished

CSV_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")


class InventoryError(ValueError):
    """A malformed inventory file; ``field`` names the offending field (``nodes[3].gpus[0].count``)."""

    def __init__(self, path: str | Path, field: str, problem: str) -> None:
        super().__init__(f"{path}: {field + ': ' if field else ''}{bounds.echo(problem, 1024)}")
        self.field = field


def _finish(path: Path, where: str, intent: RegisterNode) -> RegisterNode:
    """The report with its content id, within the contract's bounds (else InventoryError naming the field)."""
    try:
        return finished(intent)
    except bounds.BoundsError as exc:
        raise InventoryError(path, f"{where}.{exc.field}" if exc.field else where, str(exc)) from None


def _int(path: Path, field: str, value: object, *, low: int = 0, high: int = bounds.INT32_MAX) -> int:
    text = str(value).strip()
    try:
        if len(text) > 20:
            raise ValueError(text)
        number = int(text)
    except ValueError:
        raise InventoryError(path, field, f"{bounds.echo(text, 40)!r} is not an integer") from None
    if not low <= number <= high:
        raise InventoryError(path, field, f"{value!r} must be between {low} and {high}")
    return number


def _quantity(path: Path, field: str, value: object, *, milli: bool) -> int:
    try:
        return quantity.to_milli(str(value)) if milli else quantity.to_value(str(value))
    except quantity.QuantityError as exc:
        raise InventoryError(path, field, str(exc)) from None


def _capabilities(path: Path, field: str, value: object) -> IsolationCapabilities:
    """A list of isolation modes (YAML list, or a space-separated CSV cell); () when absent."""
    items = value.split() if isinstance(value, str) else value
    if not isinstance(items, list) or len(items) > len(ISOLATION_MODES):
        raise InventoryError(path, field, f"must be a list of isolation modes {list(ISOLATION_MODES)}")
    modes = [str(item).strip() for item in items]
    for mode in modes:
        if mode not in ISOLATION_MODES:
            raise InventoryError(path, field, f"{bounds.echo(mode, 40)!r} is not one of {list(ISOLATION_MODES)}")
    if len(set(modes)) != len(modes):
        raise InventoryError(path, field, f"lists a mode twice: {modes}")
    return msgspec.convert(tuple(modes), IsolationCapabilities)


def _per_gpu(path: Path, field: str, value: object, count: int) -> list[str]:
    """A per-GPU list (YAML list, or a space-separated CSV cell) of ``count`` entries, or []."""
    items = value.split() if isinstance(value, str) else value
    if not isinstance(items, list):
        raise InventoryError(path, field, "must be a list with one entry per GPU")
    if items and len(items) != count:
        raise InventoryError(path, field, f"has {len(items)} entries for count {count}")
    return [str(item).strip() for item in items]


def load_csv(path: Path, *, pool: str, table: ModelTable, config: ReportConfig) -> list[RegisterNode]:
    """Alibaba node CSV rows -> RegisterNode (cpu from cpu_milli, memory MiB -> bytes, gpu = count)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InventoryError(path, "", f"not UTF-8 text (byte {exc.start})") from None
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = [c for c in CSV_COLUMNS if c not in (reader.fieldnames or ())]
    if missing:
        raise InventoryError(path, "header", f"missing columns {missing} (need {','.join(CSV_COLUMNS)})")
    nodes = []
    for line, row in enumerate(reader, start=2):
        where = f"line {line}"
        name = (row["sn"] or "").strip()
        if not name:
            raise InventoryError(path, f"{where}.sn", "empty node name")
        count = _int(path, f"{where}.gpu", row["gpu"], high=bounds.MAX_GPUS_PER_NODE)
        if count:
            _check_model(path, where, (row["model"] or "").strip(), table, given=False)
        readings = _topology(path, where, row, count, [
            GpuReading(model=(row["model"] or "").strip(), index=i) for i in range(count)])
        nodes.append(_finish(path, where, RegisterNode(
            intent_id="", node=name, pool=pool, gpus=build_gpus(name, readings, table=table, config=config),
            cpu_milli=_int(path, f"{where}.cpu_milli", row["cpu_milli"]),
            memory_bytes=_int(path, f"{where}.memory_mib", row["memory_mib"]) * 2**20,
            heartbeat_ttl_s=config.heartbeat_ttl_s, source="static")))
    return nodes


def _topology(path: Path, where: str, entry: dict[str, Any], count: int,
              readings: list[GpuReading]) -> list[GpuReading]:
    """``readings`` with the optional ``numa_nodes``, ``interconnect_groups`` (per GPU) and
    ``isolation_capabilities`` (all GPUs) of a YAML group or CSV row."""
    numas = _per_gpu(path, f"{where}.numa_nodes", entry.get("numa_nodes") or [], count)
    groups = _per_gpu(path, f"{where}.interconnect_groups", entry.get("interconnect_groups") or [], count)
    capabilities = _capabilities(path, f"{where}.isolation_capabilities", entry.get("isolation_capabilities") or [])
    return [msgspec.structs.replace(
        reading, isolation_capabilities=capabilities,
        interconnect_group=groups[i] if groups else "",
        numa_node=_int(path, f"{where}.numa_nodes[{i}]", numas[i], high=bounds.MAX_GPUS_PER_NODE - 1)
        if numas else None) for i, reading in enumerate(readings)]


def _check_model(path: Path, field: str, model: str, table: ModelTable, *, given: bool) -> None:
    """Refuse a model the table does not know unless the entry gives its capacity (``tflops`` and
    ``vram``): a typo (``H100-SXM5``) must not register a GPU with the default capacity (100
    TFLOPS, 16 GiB) that no one sees. The message names the model and the closest known ones."""
    if given or table.find(model) is not None:
        return
    close = table.closest(model)
    hint = f"closest known: {', '.join(close)}" if close else "no known model is spelled like it"
    raise InventoryError(path, f"{field}.model", f"unknown GPU model {model!r} ({hint}); fix the name, give the "
                         "GPU's capacity (tflops and vram) in the entry, or add the model to the model table "
                         "(GPULEDGER_DISCOVERY_MODELS_FILE)")


def _readings(path: Path, where: str, groups: object, table: ModelTable) -> list[GpuReading]:
    if not isinstance(groups, list):
        raise InventoryError(path, f"{where}.gpus", "must be a list of {model, count, ...} groups")
    readings: list[GpuReading] = []
    for g, group in enumerate(groups):
        field = f"{where}.gpus[{g}]"
        if not isinstance(group, dict) or not str(group.get("model", "")).strip():
            raise InventoryError(path, f"{field}.model", "required")
        count = _int(path, f"{field}.count", group.get("count", 1), low=1, high=bounds.MAX_GPUS_PER_NODE)
        if len(readings) + count > bounds.MAX_GPUS_PER_NODE:
            raise InventoryError(path, f"{field}.count", f"more than {bounds.MAX_GPUS_PER_NODE} GPUs on one node")
        uuids = _per_gpu(path, f"{field}.uuids", group.get("uuids") or [], count)
        vram = _quantity(path, f"{field}.vram", group["vram"], milli=False) if "vram" in group else 0
        tflops = _quantity(path, f"{field}.tflops", group["tflops"], milli=True) if "tflops" in group else 0
        _check_model(path, field, str(group["model"]).strip(), table, given=bool(tflops and vram))
        readings.extend(_topology(path, field, group, count, [GpuReading(
            model=str(group["model"]).strip(), index=len(readings) + i, vram_bytes=vram, milli_tflops=tflops,
            uuid=uuids[i] if uuids else "") for i in range(count)]))
    return readings


def _yaml_node(path: Path, index: int, entry: object, *, pool: str, table: ModelTable,
               config: ReportConfig) -> RegisterNode:
    where = f"nodes[{index}]"
    if not isinstance(entry, dict) or not str(entry.get("name", "")).strip():
        raise InventoryError(path, f"{where}.name", "required")
    name = str(entry["name"]).strip()
    labels = entry.get("labels") or {}
    if not isinstance(labels, dict):
        raise InventoryError(path, f"{where}.labels", "must be a mapping of strings")
    readings = _readings(path, where, entry.get("gpus") or [], table)
    node_pool = str(entry.get("pool") or pool)
    invalid = names.problem("pool", node_pool, field="pool")
    if invalid:
        raise InventoryError(path, f"{where}.pool", invalid)
    return _finish(path, where, RegisterNode(
        intent_id="", node=name, pool=node_pool,
        gpus=build_gpus(name, readings, table=table, config=config),
        labels={str(k): str(v) for k, v in labels.items()},
        cpu_milli=_quantity(path, f"{where}.cpu", entry["cpu"], milli=True) if "cpu" in entry else 0,
        memory_bytes=_quantity(path, f"{where}.memory", entry["memory"], milli=False) if "memory" in entry else 0,
        schedulable=bool(entry.get("schedulable", True)),
        heartbeat_ttl_s=config.heartbeat_ttl_s, source="static"))


def load_yaml(path: Path, *, pool: str, table: ModelTable, config: ReportConfig) -> list[RegisterNode]:
    """The YAML inventory format (module docstring) -> RegisterNode per node; names must be unique."""
    try:
        data: Any = yaml.safe_load(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InventoryError(path, "", f"not UTF-8 text (byte {exc.start})") from None
    except (yaml.YAMLError, RecursionError, ValueError) as exc:  # ValueError: a 5,000-digit integer
        raise InventoryError(path, "", f"not YAML: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list):
        raise InventoryError(path, "nodes", "the file must be a mapping with a 'nodes' list")
    pool = str(data.get("pool") or pool)
    nodes = [_yaml_node(path, i, entry, pool=pool, table=table, config=config)
             for i, entry in enumerate(data["nodes"])]
    seen: set[str] = set()
    for i, node in enumerate(nodes):
        if node.node in seen:
            raise InventoryError(path, f"nodes[{i}].name", f"duplicate node name {node.node!r}")
        seen.add(node.node)
    return nodes


def load_inventory(path: str | Path, *, pool: str = "default", table: ModelTable | None = None,
                   config: ReportConfig | None = None) -> list[RegisterNode]:
    """RegisterNode intents for every node of a YAML inventory or an Alibaba node CSV (by suffix/header).

    ``pool`` applies to nodes that name none. ``table`` defaults to the shipped model table and
    ``config`` to :class:`ReportConfig` defaults (heartbeat_ttl_s 0: these nodes never expire).
    Raises InventoryError (naming file and field) or OSError.
    """
    path = Path(path)
    table = table or ModelTable.load()
    config = config or ReportConfig(pool=pool, source="static")
    with path.open("rb") as handle:
        first = handle.readline().decode("utf-8", "replace")
    if path.suffix.lower() == ".csv" or first.replace(" ", "").startswith("sn,"):
        return load_csv(path, pool=pool, table=table, config=config)
    return load_yaml(path, pool=pool, table=table, config=config)
