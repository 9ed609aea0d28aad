"""The reader's niceness: lowered by default (decisions first on a shared machine), 0 opts out,
out-of-range values are refused naming the setting."""

from __future__ import annotations

import pytest

from services.allocator.reader import load
from services.shared.settings import SettingsError


def test_the_reader_yields_the_cpu_by_default_and_zero_keeps_the_parents_priority() -> None:
    assert load({"GPULEDGER_DATABASE_URL": "postgresql://x/y"}).nice == 5
    assert load({"GPULEDGER_NICE": "0"}).nice == 0


@pytest.mark.parametrize("value", ["-1", "20", "five"])
def test_a_bad_niceness_is_refused_naming_it(value: str) -> None:
    with pytest.raises(SettingsError, match=r"(?i)nice"):
        load({"GPULEDGER_NICE": value})
