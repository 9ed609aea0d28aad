"""The README's exit codes hold for every command, also where click would answer otherwise: a
closed stdout (``| head``) exits 141 without a traceback (click exits 1), ``discovery --print``
ends instead of retrying the write at each heartbeat, and a ``--phase`` the stack cannot have is
bad input naming the phases (not an empty list)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from events.values import NODE_PHASES
from services.allocator.domain.filters.liveness import LOST, READY
from services.allocator.domain.framework import UNSCHEDULABLE
from services.cli import admin_commands
from services.cli.main import app

ROOT = Path(__file__).resolve().parents[3]
CLI = [sys.executable, "-c", "from services.cli.main import run; run()"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _with_closed_stdout(*args: str, timeout_s: float = 30) -> subprocess.CompletedProcess[bytes]:
    """Run the CLI with stdout a pipe whose reader has already gone (the first write fails)."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([*CLI, *args], stdout=write, stderr=subprocess.PIPE, env=ENV, timeout=timeout_s,
                              check=False)
    finally:
        os.close(write)


@pytest.mark.parametrize("args", [["--help"], ["pool", "--help"], ["nodes", "--help"]])
def test_a_closed_stdout_exits_141_quietly(args: list[str]) -> None:
    done = _with_closed_stdout(*args)
    assert done.returncode == 141, done.stderr
    assert b"Traceback" not in done.stderr


def test_discovery_print_ends_when_its_reader_goes(tmp_path: Path) -> None:
    inventory = tmp_path / "nodes.csv"
    inventory.write_text("sn,cpu_milli,memory_mib,gpu,model\n" + "".join(
        f"node-{i},64000,262144,2,V100M32\n" for i in range(5)))
    done = _with_closed_stdout("discovery", "--source", "static", "--file", str(inventory), "--print",
                               "--interval", "1", timeout_s=60)
    assert done.returncode == 141, done.stderr
    assert b"Traceback" not in done.stderr


def test_the_cli_node_phases_are_the_domains() -> None:
    assert admin_commands.NODE_PHASES == NODE_PHASES
    assert {READY, LOST, UNSCHEDULABLE} == set(NODE_PHASES)


def test_an_unknown_phase_is_bad_input_naming_the_phases() -> None:
    result = CliRunner().invoke(app, ["nodes", "--phase", "Running", "--json"])
    assert result.exit_code == 2, result.output
    answer = json.loads(result.output)
    assert answer["field"] == "phase" and "Ready, Unschedulable, Lost" in answer["error"]
    help_text = CliRunner().invoke(app, ["nodes", "--help"]).output
    assert "Running" not in help_text and "Unschedulable" in help_text
