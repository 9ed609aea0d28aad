"""Arguments refused before any stack is contacted: exit 2 naming the argument."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from services.cli.main import app


def test_nodes_show_of_an_empty_name_is_bad_input(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["nodes", "show", " ", "--json", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert json.loads(result.output)["field"] == "NAME"


def test_a_reader_that_leaves_the_pipe_ends_the_command_quietly() -> None:
    """`gpuledger nodes | head -1`: no "error: BrokenPipeError" and no traceback, exit 141 (SIGPIPE)."""
    code = ("import typer\nfrom services.cli.exits import guarded\n"
            "def body():\n    for i in range(10**6):\n        typer.echo(f'line {i}')\n"
            "guarded(False, body)\n")
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline() == b"line 0\n"
        proc.stdout.close()
        errors = proc.stderr.read()
        assert proc.wait(timeout=60) == 141
    assert errors == b""


def test_defrag_plan_of_an_unknown_objective_is_bad_input(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["defrag", "plan", "default", "--max-moves", "5", "--objective", "tidy",
                                      "--json", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert json.loads(result.output)["field"] == "objective"


def test_a_command_option_typed_before_the_command_says_where_it_goes(tmp_path: Path) -> None:
    """`gpuledger --data-dir D simulate pod.yaml` (a kubectl habit): exit 2 with click's message and
    a hint to put the option after the command; an unknown option gets no such hint."""
    before = subprocess.run([sys.executable, "-m", "services.cli.main", "--data-dir", str(tmp_path), "simulate",
                             "pod.yaml"], capture_output=True, text=True, timeout=60)
    assert before.returncode == 2
    assert "No such option: --data-dir" in before.stderr
    assert "hint: --data-dir is an option of each command: put it after the command" in before.stderr
    unknown = subprocess.run([sys.executable, "-m", "services.cli.main", "simulate", "pod.yaml", "--bogus"],
                             capture_output=True, text=True, timeout=60)
    assert unknown.returncode == 2 and "No such option: --bogus" in unknown.stderr and "hint:" not in unknown.stderr
