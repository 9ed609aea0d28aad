"""``gpuledger history`` arguments and rows: ``--since``/``--at`` take an ISO-8601 time or a duration
ago (what a person types: ``--since 1h``), and the reason column says why a life ended, not why it
once waited."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.cli.log_commands import _parse_time, _reason
from services.cli.output import BadInput

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(("text", "ago"), [("45s", timedelta(seconds=45)), ("30m", timedelta(minutes=30)),
                                           ("2h", timedelta(hours=2)), ("7d", timedelta(days=7)),
                                           (" 1h ", timedelta(hours=1))])
def test_a_duration_means_that_long_before_now(text: str, ago: timedelta) -> None:
    assert _parse_time(text, "since", now=NOW) == NOW - ago


def test_an_iso_time_without_offset_is_utc() -> None:
    assert _parse_time("2026-02-01T08:00:00", "since") == datetime(2026, 2, 1, 8, tzinfo=UTC)


@pytest.mark.parametrize("text", ["yesterday", "1w", "-1h", "1.5h", "h", "9999999h", "999999d"])
def test_anything_else_is_bad_input_naming_the_field(text: str) -> None:
    with pytest.raises(BadInput) as caught:
        _parse_time(text, "since", now=NOW)
    assert caught.value.field == "since" and repr(text) in str(caught.value)


def _row(status: str, reason: str, release_reason: str) -> dict[str, object]:
    return {"status": status, "reason": reason, "release_reason": release_reason}


def test_a_released_life_shows_why_it_ended_even_after_waiting() -> None:
    assert _reason(_row("released", "quota exceeded in namespace a", "released through the HTTP API")) == \
        "released through the HTTP API"


def test_a_granted_life_that_waited_marks_its_reason_as_past() -> None:
    assert _reason(_row("granted", "quota exceeded in namespace a", "")) == "waited: quota exceeded in namespace a"
    assert _reason(_row("granted", "", "")) == ""


def test_queued_and_rejected_lives_show_their_reason() -> None:
    assert _reason(_row("queued", "no GPU fits", "")) == "no GPU fits"
    assert _reason(_row("rejected", "bad request", "")) == "bad request"
