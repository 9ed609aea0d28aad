"""Discovery applies the contract's bounds: every hostile inventory or label is an error naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from events import bounds
from services.discovery import kubernetes as k8s
from services.discovery import nvml
from services.discovery.catalog import ModelTable
from services.discovery.inventory import GpuReading, ReportConfig
from services.discovery.static import InventoryError, load_inventory
from tests.unit.discovery.test_discovery_labels import CONFIG, gpu_node, report

NODE = "nodes:\n  - name: node-a\n    {extra}gpus:\n      - {{model: L4, {gpu}}}\n"


@pytest.mark.parametrize(("text", "field", "words"), [
    (NODE.format(extra="", gpu="count: 1000000000"), "nodes[0].gpus[0].count", "between 1 and 1024"),
    (NODE.format(extra="", gpu="count: " + "9" * 5000), "", "not YAML"),
    (NODE.format(extra="", gpu="count: '" + "9" * 5000 + "'"), "nodes[0].gpus[0].count", "not an integer"),
    (NODE.format(extra="", gpu="count: 1, numa_nodes: [x]"), "nodes[0].gpus[0].numa_nodes[0]", "not an integer"),
    (NODE.format(extra="", gpu="vram: 8Ei"), "nodes[0].gpus[0].capacity.vram_bytes", "<= 4398046511104"),
    (NODE.format(extra="", gpu="tflops: 1e999999999"), "nodes[0].gpus[0].tflops", "exponent"),
    (NODE.format(extra="labels: {zone: " + "z" * 64 + "}\n    ", gpu="count: 1"), "nodes[0].labels", "63"),
    (NODE.format(extra="memory: 4Ei\n    ", gpu="count: 1"), "nodes[0].memory_bytes", "<= 1125899906842624"),
    (NODE.replace("node-a", "n" * 300).format(extra="", gpu="count: 1"), "nodes[0].node", "253"),
    ("a: " + "[" * 5000 + "]" * 5000, "", "not YAML"),
], ids=["count-1e9", "count-5000-digits", "count-5000-digit-string",
        "numa-x", "vram-8Ei", "tflops-exp", "label-64", "memory-4Ei", "name-300",
        "deep-yaml"])
def test_static_yaml_bounds(tmp_path: Path, text: str, field: str, words: str) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(text)
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert info.value.field == field and words in str(info.value) and len(str(info.value)) < 1200


def test_static_files_that_are_not_utf8_name_the_byte(tmp_path: Path) -> None:
    for name, body in (("inventory.yaml", "nodes: [{name: été}]".encode("latin-1")),
                       ("nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nété,1,1,1,L4\n".encode("latin-1"))):
        path = tmp_path / name
        path.write_bytes(body)
        with pytest.raises(InventoryError, match="not UTF-8 text"):
            load_inventory(path)


def test_static_csv_counts_are_bounded(tmp_path: Path) -> None:
    path = tmp_path / "nodes.csv"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,1000,1024,100000000,L4\n")
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert info.value.field == "line 2.gpu"
    path.write_text("sn,cpu_milli,memory_mib,gpu,model\nn1,1000,99999999999999,1,L4\n")
    with pytest.raises(InventoryError) as info:
        load_inventory(path)
    assert info.value.field == "line 2.memory_mib"


def test_static_inventory_at_the_bounds_loads(tmp_path: Path) -> None:
    path = tmp_path / "inventory.yaml"
    path.write_text(NODE.format(extra="labels: {zone: " + "z" * 63 + "}\n    ", gpu="count: 1024"))
    [intent] = load_inventory(path)
    assert len(intent.gpus) == bounds.MAX_GPUS_PER_NODE


def test_kubernetes_labels_beyond_bounds_skip_the_node_naming_the_label() -> None:
    with pytest.raises(k8s.NodeLabelError) as info:
        report(gpu_node("node-a", {k8s.MEMORY_LABEL: "9" * 5000}))
    assert info.value.label == k8s.MEMORY_LABEL and len(str(info.value)) < 200
    with pytest.raises(k8s.NodeLabelError) as info:
        report(gpu_node("node-a", {"zone": "z" * 64}))
    assert info.value.label == "labels"


def test_nvml_report_beyond_bounds_is_a_bounds_error() -> None:
    reading = GpuReading(model="L4", index=0, vram_bytes=2**50)
    with pytest.raises(bounds.BoundsError) as info:
        nvml.node_report("node-a", [reading], table=ModelTable.load(), config=ReportConfig(pool="p"))
    assert info.value.field == "gpus[0].capacity.vram_bytes"
    assert CONFIG.pool == "default"
