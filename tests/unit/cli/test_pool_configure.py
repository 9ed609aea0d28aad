"""``pool configure``: the isolation policy and topology options are checked before any API call."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from services.cli.main import app


@pytest.mark.parametrize(("args", "field"), [
    (["--isolation-policy", "Dynamic"], "isolation-policy"),
    (["--topology", "strict"], "topology"),
])
def test_bad_values_are_bad_input_naming_the_option(args: list[str], field: str) -> None:
    result = CliRunner().invoke(app, ["pool", "configure", "default", *args, "--json"])
    assert result.exit_code == 2, result.output
    assert json.loads(result.output)["field"] == field


def test_max_tier_is_bounded_and_the_help_names_the_options() -> None:
    assert CliRunner().invoke(app, ["pool", "configure", "default", "--max-topology-tier", "4"]).exit_code == 2
    help_text = CliRunner().invoke(app, ["pool", "configure", "--help"]).output
    assert all(option in help_text for option in ("--isolation-policy", "--topology", "--max-topology-tier"))


@pytest.mark.parametrize(("args", "field"), [
    (["pool", "configure", " ", "--strategy", "fgd"], "POOL"),
    (["pool", "configure", "a/b", "--strategy", "fgd"], "POOL"),
    (["quota", "set", "Team_B", "--total-tflops", "10"], "NAMESPACE"),
])
def test_names_kubernetes_would_refuse_are_bad_input_before_any_api_call(args: list[str], field: str,
                                                                         tmp_path: object) -> None:
    result = CliRunner().invoke(app, [*args, "--data-dir", str(tmp_path), "--json"])
    assert result.exit_code == 2, result.output
    assert json.loads(result.output)["field"] == field and "not a valid Kubernetes" in result.output


def test_enforcement_is_checked_and_documented() -> None:
    result = CliRunner().invoke(app, ["pool", "configure", "default", "--enforcement", "hami", "--json"])
    assert result.exit_code == 2, result.output
    assert json.loads(result.output)["field"] == "enforcement"
    help_text = CliRunner().invoke(app, ["pool", "configure", "--help"]).output
    assert "--enforcement" in help_text and "hami-core" in help_text


@pytest.mark.parametrize(("args", "field"), [
    (["--fair-share-half-life", "2"], "fair-share-half-life"),  # no unit
    (["--fair-share-half-life", "1.5s"], "fair-share-half-life"),  # not whole seconds
    (["--reclaim-min-runtime", "-5m"], "reclaim-min-runtime"),
])
def test_fair_share_durations_are_checked_before_any_api_call(args: list[str], field: str, tmp_path: object) -> None:
    result = CliRunner().invoke(app, ["pool", "configure", "default", *args, "--data-dir", str(tmp_path), "--json"])
    assert result.exit_code == 2, result.output
    assert json.loads(result.output)["field"] == field
    assert CliRunner().invoke(app, ["pool", "configure", "default", "--reclaim-max-per-minute", "-1"]).exit_code == 2
