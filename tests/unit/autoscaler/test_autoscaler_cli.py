"""``gpuledger recommend`` offline form: output contract, canonical quantities, exit codes."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from events.metrics import encode_sample
from services.cli.main import app
from tests.unit.autoscaler.builders import T0, sample

PROFILE = """\
apiVersion: tensor-fusion.ai/v1
kind: WorkloadProfile
metadata: {name: llama}
spec:
  qos: medium
  resources:
    requests: {tflops: "10", vram: 8Gi}
    limits: {tflops: "20", vram: 16Gi}
  autoScalingConfig:
    autoSetResources: {enable: true, targetResource: all}
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    samples = tmp_path / "usage.jsonl"
    samples.write_bytes(b"\n".join(encode_sample(sample(tflops=100, vram=1_000_000_000, at=T0 + timedelta(minutes=i)))
                                   for i in range(120)))
    profile = tmp_path / "profile.yaml"
    profile.write_text(PROFILE)
    return samples, profile


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["recommend", *args])
    return result.exit_code, result.output


def test_offline_recommendation_matches_spec_case_a20(files: tuple[Path, Path]) -> None:
    code, out = invoke("--samples", str(files[0]), "--config", str(files[1]), "--json")
    assert code == 0, out
    report = json.loads(out)
    assert report["workload"] == "llama" and report["namespace"] == "ml"
    assert report["tflops"] == {"lower": "117", "target": "117", "upper": "117"}
    assert report["vram"]["upper"] == "1168723596"
    assert report["request"] == {"tflops": "100", "vram": "1717986918"}
    assert report["limit"] == {"tflops": "117", "vram": "3435973836"}
    assert report["applied"] is False and report["reason"] == "Updated"


def test_bad_sample_line_is_exit_2_naming_the_line(files: tuple[Path, Path]) -> None:
    with files[0].open("a") as out:
        out.write('\n{"type":"usage_sample","workload":"llama","namespace":"ml","at":"2026-03-05T03:00:00Z",'
                  '"vram_bytes_used":-3}\n')
    code, out = invoke("--samples", str(files[0]), "--config", str(files[1]), "--json")
    assert code == 2
    error = json.loads(out)
    assert error["field"] == "samples" and ":121:" in error["error"] and "vram_bytes_used" in error["error"]


def test_bad_profile_quantity_is_exit_2_naming_the_field(files: tuple[Path, Path]) -> None:
    files[1].write_text(PROFILE.replace('tflops: "10"', "tflops: ten"))
    code, out = invoke("--samples", str(files[0]), "--config", str(files[1]), "--json")
    assert code == 2 and "tflops" in json.loads(out)["field"]


def test_offline_needs_both_files(files: tuple[Path, Path]) -> None:
    code, out = invoke("--samples", str(files[0]), "--json")
    assert code == 2 and json.loads(out)["field"] == "config"
