"""Arguments refused before any stack is contacted: exit 2 naming the argument."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from services.cli.main import app


def test_nodes_show_of_an_empty_name_is_bad_input(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["nodes", "show", " ", "--json", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert json.loads(result.output)["field"] == "NAME"
