"""The README's tour, run as written: ``gpuledger up`` in a fresh directory, then every command
block of the tour in order through bash (``gpuledger`` on PATH), each ending with exit code 0 or
the ``# exit N`` its line announces."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cli.upstack import CLI, ENV, ROOT, UpStack, default_sigint

pytestmark = pytest.mark.integration


def tour_commands(readme: str) -> list[tuple[str, int]]:
    """(shell snippet, expected exit code) of every indented command of the tour section, in order;
    a heredoc (``<<'EOF'`` ... ``EOF``) is one snippet."""
    section = readme.split("## A five-minute tour", 1)[1].split("\n## ", 1)[0]
    lines = [line[7:] for line in section.splitlines() if line.startswith("       ")]
    out: list[tuple[str, int]] = []
    heredoc: list[str] = []
    for line in lines:
        if heredoc:
            heredoc.append(line)
            if line.strip() == "EOF":
                out.append(("\n".join(heredoc), 0))
                heredoc = []
            continue
        if "<<'EOF'" in line:
            heredoc = [line]
            continue
        command, _, comment = line.partition("#")
        expected = re.match(r"\s*exit (\d+)", comment)
        if command.strip():
            out.append((command.strip(), int(expected.group(1)) if expected else 0))
    return out


def test_the_tour_has_the_lifecycle_commands() -> None:
    commands = " ".join(c for c, _ in tour_commands((ROOT / "README.md").read_text()))
    for verb in ("submit", "simulate", "queue", "why", "quota set", "resize", "release", "events", "status",
                 "history", "replay --verify", "trace replay", "whatif"):
        assert f"gpuledger {verb}" in commands


@pytest.fixture
def workdir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="gpuledger-tour-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_readme_tour_runs_as_written(workdir: Path) -> None:
    bin_dir = workdir / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "gpuledger"
    wrapper.write_text("#!/bin/sh\nexec " + " ".join(f"'{part}'" for part in CLI) + ' "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    env = {**ENV, "PATH": f"{bin_dir}{os.pathsep}{ENV['PATH']}"}
    stack = UpStack(workdir, log=workdir / "up.log")
    try:
        stack.wait_up()
        for snippet, expected in tour_commands((ROOT / "README.md").read_text()):
            done = subprocess.run(["bash", "-c", snippet], cwd=workdir, env=env, capture_output=True, text=True,
                                  timeout=300, check=False, preexec_fn=default_sigint)
            assert done.returncode == expected, f"{snippet}\n-> exit {done.returncode}\n{done.stdout}{done.stderr}"
        second = subprocess.run(["bash", "-c", "gpuledger up"], cwd=workdir, env=env, capture_output=True,
                                text=True, timeout=60, check=False)
        assert second.returncode == 2 and f"pid {stack.process.pid}" in second.stderr
    finally:
        assert stack.interrupt() == 0, stack.log.read_text()[-4000:]
