"""Static inventories: the documented YAML format and the Alibaba node CSV importer."""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path

import pytest

from events.values import Resources
from services.discovery.static import InventoryError, load_inventory

OPENB = Path(__file__).resolve().parents[3] / "data/openb/openb_node_list_gpu_node.csv"
GiB = 2**30

EXAMPLE = """
pool: lab
nodes:
  - name: node-a
    cpu: "64"
    memory: 256Gi
    labels: {zone: a}
    gpus:
      - {model: NVIDIA-A100-SXM4-80GB, count: 2}
      - {model: L4, vram: 20Gi, tflops: "100.5", uuids: [GPU-L4-A], numa_nodes: [1]}
  - name: node-b
    pool: training
    schedulable: false
    gpus: [{model: H100_SXM}]
"""


def write(tmp_path: Path, text: str, name: str = "inventory.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_yaml_inventory_becomes_register_node_intents(tmp_path: Path) -> None:
    a, b = load_inventory(write(tmp_path, EXAMPLE))
    assert (a.node, a.pool, a.cpu_milli, a.memory_bytes, a.labels, a.schedulable) == (
        "node-a", "lab", 64_000, 256 * GiB, {"zone": "a"}, True)
    assert [(g.name, g.index, g.model, g.capacity) for g in a.gpus] == [
        ("node-a-gpu-0", 0, "A100_SXM_80G", Resources(milli_tflops=312_000, vram_bytes=80 * GiB)),
        ("node-a-gpu-1", 1, "A100_SXM_80G", Resources(milli_tflops=312_000, vram_bytes=80 * GiB)),
        ("node-a-gpu-2", 2, "L4", Resources(milli_tflops=100_500, vram_bytes=20 * GiB))]
    assert (a.gpus[2].uuid, a.gpus[2].numa_node) == ("gpu-l4-a", 1)
    assert (b.pool, b.schedulable, b.gpus[0].capacity.milli_tflops, b.heartbeat_ttl_s) == (
        "training", False, 989_000, 0.0)


def test_loading_twice_gives_the_same_intent_ids_and_a_change_gives_a_new_one(tmp_path: Path) -> None:
    first = [n.intent_id for n in load_inventory(write(tmp_path, EXAMPLE))]
    again = [n.intent_id for n in load_inventory(write(tmp_path, EXAMPLE))]
    changed = [n.intent_id for n in load_inventory(write(tmp_path, EXAMPLE.replace("count: 2", "count: 3")))]
    assert first == again and changed[0] != first[0] and changed[1] == first[1]


@pytest.mark.parametrize(("text", "field"), [
    ("nodes: {}", "nodes"),
    ("nodes: [{gpus: []}]", "nodes[0].name"),
    ("nodes: [{name: a, gpus: [{count: 1}]}]", "nodes[0].gpus[0].model"),
    ("nodes: [{name: a, gpus: [{model: T4, count: two}]}]", "nodes[0].gpus[0].count"),
    ("nodes: [{name: a, gpus: [{model: T4, count: 0}]}]", "nodes[0].gpus[0].count"),
    ("nodes: [{name: a, gpus: [{model: T4, vram: big}]}]", "nodes[0].gpus[0].vram"),
    ("nodes: [{name: a, gpus: [{model: T4, count: 2, uuids: [x]}]}]", "nodes[0].gpus[0].uuids"),
    ("nodes: [{name: a, cpu: fast}]", "nodes[0].cpu"),
    ("nodes: [{name: a, gpus: {model: T4}}]", "nodes[0].gpus"),
    ("nodes: [{name: a}, {name: a}]", "nodes[1].name"),
])
def test_bad_yaml_names_the_field(tmp_path: Path, text: str, field: str) -> None:
    with pytest.raises(InventoryError) as error:
        load_inventory(write(tmp_path, text))
    assert error.value.field == field and field in str(error.value) and "inventory.yaml" in str(error.value)


def test_openb_csv_imports_every_node_and_gpu() -> None:
    with OPENB.open() as handle:
        rows = list(csv.DictReader(handle))
    nodes = load_inventory(OPENB, pool="openb")
    assert [n.node for n in nodes] == [r["sn"] for r in rows]
    assert sum(len(n.gpus) for n in nodes) == sum(int(r["gpu"]) for r in rows)
    expected = Counter()  # type: Counter[str]
    for r in rows:
        expected[r["model"]] += int(r["gpu"])
    assert Counter(g.model for n in nodes for g in n.gpus) == expected
    first, row = nodes[0], rows[0]
    assert (first.pool, first.cpu_milli, first.memory_bytes) == (
        "openb", int(row["cpu_milli"]), int(row["memory_mib"]) * 2**20)
    names = [g.name for n in nodes for g in n.gpus]
    assert len(set(names)) == len(names)


def test_csv_with_unknown_model_is_refused_and_bad_rows_name_the_line(tmp_path: Path) -> None:
    unknown = write(tmp_path, "sn,cpu_milli,memory_mib,gpu,model\nn1,8000,1024,1,Z9\nn2,8000,1024,0,\n", "nodes.csv")
    with pytest.raises(InventoryError, match=r"line 2\.model: unknown GPU model 'Z9'"):
        load_inventory(unknown)
    bad = write(tmp_path, "sn,cpu_milli,memory_mib,gpu,model\nn1,8000,1024,1,T4\nn2,8000,x,1,T4\n", "bad.csv")
    with pytest.raises(InventoryError, match=r"line 3\.memory_mib"):
        load_inventory(bad)
    with pytest.raises(InventoryError, match="missing columns"):
        load_inventory(write(tmp_path, "name,gpus\nn1,1\n", "other.csv"))


def test_an_unknown_model_is_refused_naming_the_closest_unless_the_entry_gives_capacity(tmp_path: Path) -> None:
    """Issue 28 item 12: a typo (H100-SXM5) registered 100 TFLOPS / 16 GiB GPUs with only a log warning."""
    typo = write(tmp_path, "nodes:\n  - name: n1\n    gpus: [{model: H100-SXM5, count: 2}]\n", "typo.yaml")
    with pytest.raises(InventoryError, match=r"nodes\[0\]\.gpus\[0\]\.model: unknown GPU model 'H100-SXM5' "
                       r"\(closest known: H100_SXM"):
        load_inventory(typo)
    half = write(tmp_path, "nodes:\n  - name: n1\n    gpus: [{model: H100-SXM5, tflops: '989'}]\n", "half.yaml")
    with pytest.raises(InventoryError, match="give the GPU's capacity"):
        load_inventory(half)
    given = write(tmp_path, "nodes:\n  - name: n1\n    gpus: [{model: H100-SXM5, tflops: '989', vram: 80Gi}]\n",
                  "given.yaml")
    (node,) = load_inventory(given)
    assert node.gpus[0].capacity == Resources(milli_tflops=989_000, vram_bytes=80 * GiB)
