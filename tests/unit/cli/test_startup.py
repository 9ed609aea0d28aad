"""Start-up of the CLI: importing it loads none of the heavy libraries (they are imported by the
commands that use them), every ``--help`` works, and the strategy names of ``pool configure
--help`` are the domain registry's."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from services.cli.main import app

HEAVY = ("kubernetes_asyncio", "matplotlib", "numpy", "aiohttp", "sqlalchemy", "alembic", "nats", "asyncpg",
         "psycopg", "structlog", "rich", "yaml", "services.allocator", "services.admission", "services.discovery",
         "services.autoscaler", "services.trace", "services.podspec")


def _loaded_after(code: str) -> set[str]:
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    modules = json.loads(done.stdout.splitlines()[-1])
    return {m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)}


def test_importing_the_cli_loads_no_heavy_module() -> None:
    assert _loaded_after("import services.cli.main") == set()


def test_top_level_help_loads_no_heavy_module() -> None:
    code = ("import sys\nsys.argv = ['gpuledger', '--help']\nfrom services.cli.main import run\n"
            "try:\n    run()\nexcept SystemExit:\n    pass")
    assert _loaded_after(code) == set()


COMMANDS = [[], ["up"], ["submit"], ["status"], ["simulate"], ["release"], ["resize"], ["queue"], ["why"],
            ["events"], ["history"], ["replay"], ["migrate"], ["sql"], ["quota", "set"], ["quota", "list"],
            ["quota", "remove"], ["pool", "list"], ["pool", "configure"], ["nodes"], ["nodes", "show"],
            ["trace", "replay"], ["trace", "experiment"], ["admission"], ["discovery"], ["autoscaler"],
            ["recommend"], ["allocator"], ["api"]]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "gpuledger")
def test_every_help_works(command: list[str]) -> None:
    result = CliRunner().invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output


def test_api_without_a_database_exits_2_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """``gpuledger api`` follows the log in PostgreSQL: without ``GPULEDGER_DATABASE_URL`` it never starts."""
    monkeypatch.delenv("GPULEDGER_DATABASE_URL", raising=False)
    result = CliRunner().invoke(app, ["api"])
    assert result.exit_code == 2 and "GPULEDGER_DATABASE_URL" in result.output, result.output
    monkeypatch.setenv("GPULEDGER_POLL_S", "0")
    result = CliRunner().invoke(app, ["api"])
    assert result.exit_code != 0 and "poll_s" in result.output.lower(), result.output


def test_pool_help_lists_the_registry_strategies() -> None:
    from services.allocator.domain import profile
    from services.cli.admin_commands import STRATEGY_NAMES

    assert tuple(sorted(profile.STRATEGIES)) == STRATEGY_NAMES
    result = CliRunner().invoke(app, ["pool", "configure", "--help"])
    unwrapped = "".join(result.output.split())  # the help wraps long names at hyphens
    assert all(name in unwrapped for name in STRATEGY_NAMES)


def test_python_dash_m_runs_the_cli() -> None:
    """`python3 -m services.cli.main --help` (a checkout without the console script) prints the help
    instead of importing the module and exiting 0 silently."""
    done = subprocess.run([sys.executable, "-m", "services.cli.main", "--help"], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0
    assert done.stdout.startswith("Usage: gpuledger ") and "submit" in done.stdout
