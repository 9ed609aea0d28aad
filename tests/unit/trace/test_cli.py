"""``gpuledger trace experiment`` on a 100-node slice of the openb trace (2 seeds), JSON contract,
best-fit beating random, runs repeatable to the digit, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.cli.main import app
from services.trace import openb

runner = CliRunner()


def _slice(tmp_path: Path, nodes: int) -> Path:
    lines = openb.NODES_CSV.read_text().splitlines()
    path = tmp_path / f"nodes{nodes}.csv"
    path.write_text("\n".join(lines[: nodes + 1]) + "\n")
    return path


def _experiment(*args: str) -> dict:  # type: ignore[type-arg]
    result = runner.invoke(app, ["trace", "experiment", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)  # type: ignore[no-any-return]


def test_experiment_json_on_a_100_node_slice(tmp_path: Path) -> None:
    nodes = _slice(tmp_path, 100)
    common = ["--nodes", str(nodes), "--pods", str(openb.PODS_CSV), "--seeds", "2"]
    best = _experiment(*common, "--strategy", "best-fit")
    rand = _experiment(*common, "--strategy", "random")
    assert set(best) >= {"strategy", "trace", "seeds", "unallocated_pct", "unallocated_pct_by_seed", "decisions_per_s"}
    assert best["strategy"] == "best-fit" and best["trace"] == "default" and best["seeds"] == 2
    assert set(best["unallocated_pct"]) == {"100", "110", "130"}
    assert all(len(v) == 2 for v in best["unallocated_pct_by_seed"].values())
    assert best["decisions_per_s"] > 0
    for x in ("100", "130"):
        assert 0 <= best["unallocated_pct"][x] < rand["unallocated_pct"][x]


def test_a_seed_gives_the_same_numbers_every_run(tmp_path: Path) -> None:
    nodes = _slice(tmp_path, 25)
    common = ["--nodes", str(nodes), "--pods", str(openb.PODS_CSV), "--seeds", "1", "--strategy", "fgd"]
    first, second = _experiment(*common), _experiment(*common)
    assert first["unallocated_pct_by_seed"] == second["unallocated_pct_by_seed"]
    assert 0 < first["unallocated_pct"]["130"] < 100


def test_plot_is_written(tmp_path: Path) -> None:
    nodes = _slice(tmp_path, 30)
    out = tmp_path / "curve.png"
    result = runner.invoke(app, ["trace", "experiment", "--nodes", str(nodes), "--pods", str(openb.PODS_CSV),
                                 "--seeds", "1", "--strategy", "best-fit", "--strategy", "frag-cpu",
                                 "--plot", str(out)])
    assert result.exit_code == 0, result.output
    assert "frag-cpu" in result.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(("args", "field"), [
    (["--strategy", "nope"], "strategy"),
    (["--strategy", "fgd", "--pods", "/nonexistent.csv"], "pods"),
])
def test_bad_input_names_the_field(args: list[str], field: str) -> None:
    base = {"--nodes": str(openb.NODES_CSV), "--pods": str(openb.PODS_CSV)}
    merged = list(args)
    for key, value in base.items():
        if key not in merged:
            merged += [key, value]
    result = runner.invoke(app, ["trace", "experiment", *merged, "--json"])
    assert result.exit_code == 2
    assert json.loads(result.output)["field"] == field


@pytest.mark.timeout(60, method="thread")  # before the fix a CPU-only trace hung in the resampling
@pytest.mark.parametrize("defrag", [[], ["--defrag", "5%"]])
@pytest.mark.parametrize("rows", [["c0,4000,1024,0,0", "c1,2000,512,0,0"], []])
def test_a_trace_without_gpu_demand_is_refused_naming_the_file(tmp_path: Path, rows: list[str],
                                                              defrag: list[str]) -> None:
    pods = tmp_path / "openb_pod_list_cpu.csv"
    pods.write_text("\n".join(["name,cpu_milli,memory_mib,num_gpu,gpu_milli", *rows]) + "\n")
    result = runner.invoke(app, ["trace", "experiment", "--nodes", str(_slice(tmp_path, 5)), "--pods", str(pods),
                                 "--seeds", "1", "--strategy", "fgd", *defrag, "--json"])
    assert result.exit_code == 2, result.output
    error = json.loads(result.output)
    assert error["field"] == "pods"
    assert error["error"].startswith(f"{pods}: no GPU demand ({len(rows)} pods")


def test_defrag_json_on_a_12_node_slice(tmp_path: Path) -> None:
    nodes = _slice(tmp_path, 12)
    result = runner.invoke(app, ["trace", "experiment", "--nodes", str(nodes), "--pods", str(openb.PODS_CSV),
                                 "--seeds", "1", "--strategy", "fgd", "--defrag", "5%", "--defrag", "50", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert [(r["strategy"], r["budget_pct"], r["objective"]) for r in out] == [
        ("fgd", 5.0, "fragmentation"), ("fgd", 50.0, "fragmentation")]
    for r in out:
        assert set(r["unallocated_pct"]) == set(r["unallocated_pct_without"])
        assert r["unallocated_pct"] and set(r["unallocated_pct"]) <= {"100", "110", "130"}
        assert r["frag_after"] <= r["frag_before"]
        (run,) = r["runs"]
        assert run["seed"] == 42 and run["allocations"] > 0
        assert run["moves"] <= max(1, run["allocations"] * r["budget_pct"] // 100)


@pytest.mark.parametrize(("args", "field"), [
    (["--defrag", "0%"], "defrag"), (["--defrag", "lots"], "defrag"), (["--defrag", "200%"], "defrag"),
    (["--defrag", "1%", "--defrag-objective", "speed"], "defrag_objective"),
    (["--defrag", "1%", "--plot", "x.png"], "plot"),
])
def test_bad_defrag_input_names_the_field(args: list[str], field: str) -> None:
    result = runner.invoke(app, ["trace", "experiment", "--strategy", "fgd", *args, "--json"])
    assert result.exit_code == 2, result.output
    assert json.loads(result.output)["field"] == field


def _fairness(*args: str) -> list[dict]:  # type: ignore[type-arg]
    result = runner.invoke(app, ["trace", "fairness", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)  # type: ignore[no-any-return]


def test_fairness_json_on_a_25_node_slice_is_repeatable(tmp_path: Path) -> None:
    common = ["--nodes", str(_slice(tmp_path, 25)), "--scale", "1", "--hours", "1", "--warmup", "0.25",
              "--seeds", "1", "--policy", "no-quotas", "--policy", "hard-quotas"]
    first = _fairness(*common)
    assert [r["policy"] for r in first] == ["no-quotas", "hard-quotas"]
    assert set(first[0]["below_guarantee_pct"]) == {"a", "b", "c", "d"}
    assert first[0]["utilisation_gap_pts"] == 0.0
    assert 0 < first[1]["utilisation_pct"] <= 100
    assert first[1]["utilisation_gap_pts"] == pytest.approx(first[0]["utilisation_pct"] - first[1]["utilisation_pct"],
                                                            abs=1e-3)
    second = _fairness(*common)
    for a, b in zip(first, second, strict=True):
        for run_a, run_b in zip(a.pop("by_seed"), b.pop("by_seed"), strict=True):
            run_a.pop("wall_s"), run_b.pop("wall_s")
            assert run_a == run_b
        assert a == b


def test_fairness_table_names_every_policy(tmp_path: Path) -> None:
    result = runner.invoke(app, ["trace", "fairness", "--nodes", str(_slice(tmp_path, 20)), "--scale", "1",
                                 "--hours", "0.5", "--warmup", "0.1", "--seeds", "1"])
    assert result.exit_code == 0, result.output
    for policy in ("no-quotas", "hard-quotas", "borrow", "reclaim", "fair-share", "reclaim-all"):
        assert policy in result.output


@pytest.mark.parametrize(("args", "field"), [
    (["--policy", "lottery"], "policy"),
    (["--hours", "1", "--warmup", "2"], "warmup"),
    (["--pods", "/nonexistent.csv"], "pods"),
])
def test_fairness_bad_input_names_the_field(args: list[str], field: str) -> None:
    result = runner.invoke(app, ["trace", "fairness", *args, "--json"])
    assert result.exit_code == 2
    assert json.loads(result.output)["field"] == field
