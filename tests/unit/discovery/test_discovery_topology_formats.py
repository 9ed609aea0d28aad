"""The optional topology fields of the static formats and of GFD labels: read when given, unknown when not."""

from __future__ import annotations

from pathlib import Path

import pytest

from events.intents import RegisterNode
from services.discovery import kubernetes as k8s
from services.discovery.catalog import ModelTable
from services.discovery.inventory import ReportConfig
from services.discovery.static import InventoryError, load_inventory
from tests.fixtures.kube_api import build_node

ALL = ("shared", "soft", "hard", "partitioned")


def write(tmp_path: Path, text: str, name: str = "inventory.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_yaml_groups_carry_numa_interconnect_groups_and_capabilities(tmp_path: Path) -> None:
    (node,) = load_inventory(write(tmp_path, """
nodes:
  - name: hgx
    gpus:
      - {model: H100_SXM, count: 2, numa_nodes: [0, 1], interconnect_groups: [nvl0, nvl0],
         isolation_capabilities: [shared, soft, hard, partitioned]}
      - {model: L4}
"""))
    h1, h2, l4 = node.gpus
    assert [(g.numa_node, g.interconnect_group, g.isolation_capabilities) for g in (h1, h2)] == [
        (0, "nvl0", ALL), (1, "nvl0", ALL)]
    assert (l4.index, l4.numa_node, l4.interconnect_group, l4.isolation_capabilities) == (2, None, "", ())


@pytest.mark.parametrize(("group", "field", "needle"), [
    ("isolation_capabilities: [soft, exclusive]", "isolation_capabilities", "'exclusive' is not one of"),
    ("isolation_capabilities: [soft, soft]", "isolation_capabilities", "twice"),
    ("isolation_capabilities: soft hard shared partitioned soft", "isolation_capabilities", "list of"),
    ("isolation_capabilities: {soft: true}", "isolation_capabilities", "list of"),
    ("interconnect_groups: [a]", "interconnect_groups", "1 entries for count 2"),
    ("interconnect_groups: {a: b}", "interconnect_groups", "one entry per GPU"),
    ("numa_nodes: [0, x]", "numa_nodes[1]", "not an integer"),
])
def test_bad_topology_fields_are_named(tmp_path: Path, group: str, field: str, needle: str) -> None:
    text = f"nodes:\n  - name: a\n    gpus:\n      - model: T4\n        count: 2\n        {group}\n"
    with pytest.raises(InventoryError, match=needle) as error:
        load_inventory(write(tmp_path, text))
    assert error.value.field == f"nodes[0].gpus[0].{field}"


def test_an_overlong_interconnect_group_is_refused_by_the_contract_bounds(tmp_path: Path) -> None:
    text = "nodes:\n  - name: a\n    gpus: [{model: T4, interconnect_groups: [" + "g" * 64 + "]}]\n"
    with pytest.raises(InventoryError, match="interconnect_group"):
        load_inventory(write(tmp_path, text))


def test_csv_optional_columns(tmp_path: Path) -> None:
    text = ("sn,cpu_milli,memory_mib,gpu,model,numa_nodes,interconnect_groups,isolation_capabilities\n"
            "n1,8000,1024,2,A100_SXM_80G,0 1,nvl0 nvl0,soft hard partitioned\n"
            "n2,8000,1024,1,T4,,,\n")
    n1, n2 = load_inventory(write(tmp_path, text, "nodes.csv"))
    assert [(g.numa_node, g.interconnect_group, g.isolation_capabilities) for g in n1.gpus] == [
        (0, "nvl0", ("soft", "hard", "partitioned")), (1, "nvl0", ("soft", "hard", "partitioned"))]
    assert (n2.gpus[0].numa_node, n2.gpus[0].interconnect_group, n2.gpus[0].isolation_capabilities) == (None, "", ())
    bad = text.replace("0 1,", "0,")
    with pytest.raises(InventoryError, match=r"line 2\.numa_nodes: has 1 entries for count 2"):
        load_inventory(write(tmp_path, bad, "bad.csv"))


GFD = {k8s.PRODUCT_LABEL: "NVIDIA-H100-80GB-HBM3", k8s.COUNT_LABEL: "2"}


def _report(labels: dict[str, str]) -> RegisterNode:
    config = ReportConfig(pool="p", source="kubernetes")
    report = k8s.node_report(build_node("n", labels={**GFD, **labels}, cpu="8", memory="8Gi"),
                             table=ModelTable.load(), config=config)
    assert report is not None
    return report


@pytest.mark.parametrize(("value", "expected"), [
    (None, ()), ("true", ALL), ("True", ALL), ("false", ("shared", "soft", "hard"))])
def test_gfd_mig_capable_label_sets_the_capabilities(value: str | None, expected: tuple[str, ...]) -> None:
    report = _report({} if value is None else {k8s.MIG_CAPABLE_LABEL: value})
    assert [g.isolation_capabilities for g in report.gpus] == [expected, expected]


def test_a_malformed_mig_capable_label_names_node_label_and_value() -> None:
    with pytest.raises(k8s.NodeLabelError, match=r"nvidia\.com/mig\.capable='maybe'.*true or false"):
        _report({k8s.MIG_CAPABLE_LABEL: "maybe"})
