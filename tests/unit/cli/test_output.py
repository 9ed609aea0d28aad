"""Human units of the CLI's text output, canonical strings kept for JSON, and tables that stay
readable through a pipe (tab-separated full values, never squeezed)."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.cli import output


@pytest.mark.parametrize(("canonical", "text"), [
    ("1788682500m", "1,788,682.5 TFLOPS"),
    ("1788700m", "1,788.7 TFLOPS"),
    ("5k", "5,000 TFLOPS"),
    ("5000", "5,000 TFLOPS"),
    ("10", "10 TFLOPS"),
    ("500m", "0.5 TFLOPS"),
    ("0", "0 TFLOPS"),
])
def test_tflops_in_human_units(canonical: str, text: str) -> None:
    assert output.tflops(canonical) == text


@pytest.mark.parametrize(("canonical", "text"), [
    ("80Gi", "80 GiB"), ("85899345920", "80 GiB"), ("4Gi", "4 GiB"), ("512Mi", "512 MiB"), ("1536Mi", "1.5 GiB"),
])
def test_vram_in_human_units(canonical: str, text: str) -> None:
    assert output.vram(canonical) == text


def test_an_unset_limit_reads_unset_not_zero() -> None:
    assert output.tflops("0", unset=True) == "unset"
    assert output.request_text({"tflops": "0", "vram": "0"}, unset=True) == "unset"
    assert output.request_text({"tflops": "20", "vram": "0"}, unset=True) == "20 TFLOPS, unset"
    assert output.request_text({"tflops": "0", "vram": "4Gi"}) == "0 TFLOPS, 4 GiB"


def test_a_compute_share_shows_as_percent() -> None:
    assert output.request_text({"tflops": "0", "vram": "4Gi", "compute_percent": "50"}) == "50 %, 4 GiB"
    assert output.percent("12500m") == "12.5 %"


def test_not_a_quantity_is_none() -> None:
    assert output.quantity("lots") is None and output.quantity("") is None and output.quantity(None) is None


@given(st.integers(min_value=0, max_value=10**15))
def test_milli_quantities_round_trip_through_the_parser(milli: int) -> None:
    assert output.quantity(f"{milli}m") == Decimal(milli) / 1000


def test_a_table_through_a_pipe_is_tab_separated_with_full_values(capsys: pytest.CaptureFixture[str]) -> None:
    long_reason = "quota exceeded in namespace team-a for total.requests.tflops: requested 300, limit 150"
    output.table(("namespace", "pod", "reason"), [["team-a", "a-pod-with-a-long-name-0001", long_reason]],
                 title="allocations")
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["namespace\tpod\treason", f"team-a\ta-pod-with-a-long-name-0001\t{long_reason}"]


def test_outcome_exit_codes() -> None:
    from services.cli.stack_commands import outcome_code

    assert outcome_code({"type": "allocation_granted"}) == 0
    assert outcome_code({"type": "allocation_queued"}) == 3
    assert outcome_code({"type": "allocation_rejected"}) == 4
    assert outcome_code({"type": "intent_rejected"}) == 2
    assert outcome_code({"type": "existing", "status": "queued"}) == 3
    assert outcome_code({"type": "existing", "status": "granted"}) == 0


def test_a_wide_table_on_an_80_column_terminal_prints_records_with_full_values(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(output, "is_terminal", lambda: True)
    monkeypatch.setenv("COLUMNS", "80")
    columns = ("namespace", "pod", "node", "gpus", "request", "requested", "granted", "released", "reason")
    row = ["team-a", "demo", "openb-node-0000", "openb-node-0000-gpu-0", "10 TFLOPS, 4 GiB", "2026-11-24 12:52:59",
           "2026-11-24 12:52:59", "2026-11-24 12:53:53", "released through the HTTP API"]
    output.table(columns, [row], title="allocations")
    text = capsys.readouterr().out
    assert all(len(line) <= 80 for line in text.splitlines())
    for column, value in zip(columns, row, strict=True):
        assert any(line.startswith(column + ":") and line.endswith(value) for line in text.splitlines())


def test_a_narrow_table_on_a_terminal_stays_a_table(capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(output, "is_terminal", lambda: True)
    monkeypatch.setenv("COLUMNS", "80")
    output.table(("pool", "GPUs", "TFLOPS"), [["default", "3", "315 TFLOPS"]], title="pools")
    lines = capsys.readouterr().out.splitlines()
    assert any("default" in line and "315 TFLOPS" in line for line in lines)


def test_full_width_digits_are_not_a_quantity() -> None:
    assert output.quantity("１０") is None and output.quantity("10") == Decimal(10)


def test_why_prints_charges_in_tflops_and_gib_not_canonical_strings(capsys: pytest.CaptureFixture[str]) -> None:
    from services.cli.lifecycle_commands import _print_tree

    _print_tree({"code": "granted", "charges": [{"tflops": "133714m", "vram": "19531250Ki"}]}, indent="  ")
    text = capsys.readouterr().out
    assert "133.7 TFLOPS, 18.6 GiB" in text and "133714m" not in text and "Ki" not in text
