"""``gpuledger shares``: what a tired user types is refused before any stack is contacted (exit 2,
naming the option and the value), the body ``set`` sends, and the text of ``list`` and ``status``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.cli import share_commands
from services.cli.main import app
from services.cli.output import BadInput
from services.cli.stack_commands import share_lines


def test_amount_pairs_become_the_api_amount() -> None:
    assert share_commands.parse_amount("tflops=100, vram=80Gi,GPUS=4", option="guarantee") == {
        "tflops": "100", "vram": "80Gi", "gpus": 4}


@pytest.mark.parametrize(("text", "says"), [
    ("", "RESOURCE=QUANTITY"), ("tflops=100,", "RESOURCE=QUANTITY"), ("100", "is not RESOURCE=QUANTITY"),
    ("cpu=4", "is not RESOURCE=QUANTITY"), ("gpus=2.5", "whole number"), ("gpus=-1", "whole number"),
    ("vram=-8Gi", "non-negative"), ("tflops=lots", "non-negative"), ("gpus=1,gpus=2", "given twice"),
])
def test_a_bad_amount_names_the_option_and_the_part(text: str, says: str) -> None:
    with pytest.raises(BadInput) as caught:
        share_commands.parse_amount(text, option="borrow-limit")
    assert caught.value.field == "borrow-limit" and says in str(caught.value)


def test_set_body_keeps_other_pools_and_replaces_this_one() -> None:
    kept = [{"pool": "a", "guaranteed": {"gpus": 1}}, {"pool": "b", "guaranteed": {"gpus": 9}}]
    body = share_commands.share_body(namespaces=["ml"], pool="b", guarantee="gpus=2", borrow_limit=None,
                                     lend_limit="tflops=50", weight=2, parent="dept", kept=kept)
    assert body == {"namespaces": ["ml"], "weight": 2, "parent": "dept", "pools": [
        {"pool": "a", "guaranteed": {"gpus": 1}},
        {"pool": "b", "guaranteed": {"gpus": 2}, "lending_limit": {"tflops": "50"}}]}


@pytest.mark.parametrize(("args", "field"), [
    (["shares", "set", "Team_A"], "NAME"),
    (["shares", "set", "team", "--namespace", "ML"], "namespace"),
    (["shares", "set", "team", "-n", "ml", "-n", "ml"], "namespace"),
    (["shares", "set", "team", "--guarantee", "gpus=1"], "pool"),
    (["shares", "set", "team", "--pool", "a/b", "--guarantee", "gpus=1"], "pool"),
    (["shares", "set", "team", "--parent", "Dept!"], "parent"),
    (["shares", "show", "no such"], "NAME"),
    (["shares", "remove", ""], "NAME"),
    (["shares", "list", "--pool", " "], "pool"),
])
def test_bad_arguments_exit_2_naming_the_field_before_contacting_a_stack(args: list[str], field: str,
                                                                          tmp_path: Path) -> None:
    result = CliRunner().invoke(app, [*args, "--json", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert json.loads(result.output)["field"] == field


def test_a_weight_outside_1_to_1000_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["shares", "set", "team", "--weight", "0", "--data-dir", str(tmp_path)])
    assert result.exit_code == 2 and "--weight" in result.output


FIGURE = {"tflops": "300", "vram": "0", "gpus": 3}


def test_list_rows_and_status_lines_name_parent_and_figures() -> None:
    share = {"name": "a", "parent": "dept", "pools": [{
        "pool": "p", "guaranteed": FIGURE, "used": {"tflops": "50", "vram": "40Gi", "gpus": 1},
        "borrowed": {"tflops": "0", "vram": "0", "gpus": 0}, "lent": {"tflops": "166666m", "vram": "0", "gpus": 2},
        "fair_share": {"tflops": "312500m", "vram": "80Gi", "gpus": 3.12}, "waiting": 0}]}
    (row,) = share_commands.share_rows([share])
    assert row[0] == "dept/a" and row[1] == "p" and row[-1] == "0"
    assert "3.12 GPUs" in row[6] and "3 GPUs" in row[2]
    entry = {"share": "a", "parent": "dept", **{k: v for k, v in share["pools"][0].items()}}  # type: ignore[index]
    (line,) = share_lines([entry])
    assert line.startswith("share dept/a in p: used ") and "1 of 3 GPUs" in line and "0 waiting" in line
