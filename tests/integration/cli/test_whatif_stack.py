"""``gpuledger whatif`` and ``POST /api/v1/whatif`` against one real ``gpuledger up`` (3 GPUs): the
baseline replay of the stack's own log equals it, a tighter quota changes a request's fate, the
plot is written, bad input is refused naming the field, and nothing is appended to the log."""

from __future__ import annotations

import json
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cli.upstack import INVENTORY, POD, UpStack, as_json, gpuledger

pytestmark = pytest.mark.integration



@pytest.fixture(scope="module")
def stack() -> Iterator[Path]:
    """A running ``gpuledger up --inventory`` with a small history: three pods granted, one queued
    behind the quota, then a release that lets it in; yields the data dir."""
    root = Path(tempfile.mkdtemp(prefix="gpuledger-whatif-"))
    (root / "nodes.csv").write_text(INVENTORY)
    up = UpStack(root, "--data-dir", str(root / "stack"), "--inventory", str(root / "nodes.csv"), "--json",
                 log=root / "up.log")
    try:
        up.wait_up()
        data = root / "stack"
        assert cli(data, "quota", "set", "team-a", "--total-tflops", "25").returncode == 0
        for name, tflops, code in (("one", "10", 0), ("two", "10", 0), ("three", "10", 3)):
            path = root / f"{name}.yaml"
            path.write_text(POD.format(name=name, namespace="team-a", tflops=tflops))
            done = cli(data, "submit", str(path))
            assert done.returncode == code, done.stdout + done.stderr
        assert cli(data, "release", "team-a/one").returncode == 0
        yield data
    finally:
        assert up.interrupt() == 0, up.log.read_text()[-4000:]
        shutil.rmtree(root, ignore_errors=True)


def cli(data_dir: Path, *args: str) -> Any:
    return gpuledger(*args, "--data-dir", str(data_dir))


def _last_position(data_dir: Path) -> int:
    done = cli(data_dir, "replay", "--json")
    return int(as_json(done)["position"])


def test_the_cli_replays_the_stacks_log_fairly_and_shows_what_a_tighter_quota_changes(stack: Path) -> None:
    before = _last_position(stack)
    plot = stack.parent / "whatif.png"
    done = cli(stack, "whatif", "--since", "1h", "--strategy", "best-fit", "--quota", "team-a=15", "--json",
               "--plot", str(plot))
    report = as_json(done)
    assert done.returncode == 0, done.stderr
    assert report["fairness"] == {"mismatches": 0, "examples": []}
    assert report["intents"] >= 6 and report["first_position"] == 1
    base, alt = report["runs"]
    assert base["summary"]["requests"] == {"granted": 2, "queued": 1, "rejected": 0, "waiting_at_end": 0}
    assert alt["name"] == "strategy=best-fit quota team-a=15 TFLOPS"
    assert alt["summary"]["requests"]["granted"] == 1  # the second pod no longer fits 15 TFLOPS
    (comparison,) = report["comparisons"]
    assert comparison["differing"] >= 1 and "team-a" in comparison["first"][0]["namespace"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = cli(stack, "whatif", "--since", "1h", "--strategy", "best-fit")
    assert text.returncode == 0 and "baseline replay equals the log: yes" in text.stdout, text.stdout + text.stderr
    assert "queue wait p50 / p95 / p99" in text.stdout
    assert _last_position(stack) == before  # read-only: nothing appended


@pytest.mark.parametrize(("args", "field"), [
    (("--strategy", "fastest"), "strategy"), (("--since", "yesterday"), "since"), (("--quota", "team-a"), "quota"),
    (("--nodes", "+2:H100"), "nodes"), (("--pool", "Bad_Pool"), "pool"),
])
def test_bad_input_exits_2_naming_the_field(stack: Path, args: tuple[str, ...], field: str) -> None:
    done = cli(stack, "whatif", *args, "--json")
    assert done.returncode == 2, done.stdout + done.stderr
    assert as_json(done)["field"] == field


def _post(stack: Path, body: object) -> tuple[int, Any]:
    found = json.loads((stack / "endpoints.json").read_text())
    token = (stack / "secrets" / "api-token").read_text().strip()
    request = urllib.request.Request(found["allocator_http"] + "/api/v1/whatif", data=json.dumps(body).encode(),
                                     method="POST", headers={"Authorization": f"Bearer {token}",
                                                             "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_api_answers_the_same_report(stack: Path) -> None:
    status, report = _post(stack, {"since": "1h", "preemption": "off", "strategy": ["fgd", "best-fit"]})
    assert status == 200, report
    assert report["fairness"]["mismatches"] == 0
    assert [r["name"] for r in report["runs"]] == ["baseline", "strategy=fgd preemption=off",
                                                   "strategy=best-fit preemption=off"]
    status, error = _post(stack, {"since": "1h", "quota": ["team-a"]})
    assert status == 400 and error["field"] == "quota"
    status, error = _post(stack, {"window": "1h"})
    assert status == 400 and error["field"] == "body.window"
