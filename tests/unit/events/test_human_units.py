"""The one formatter of user-facing messages (events.quantity): TFLOPS, GiB and percent, never
milli-TFLOPS or raw bytes; and quantities take ASCII digits only."""

from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events import quantity


@pytest.mark.parametrize(("milli", "text"), [
    (6000, "6 TFLOPS"), (133_714, "133.714 TFLOPS"), (494_500, "494.5 TFLOPS"), (969_000, "969 TFLOPS"),
    (500, "0.5 TFLOPS"), (0, "0 TFLOPS"), (1_788_682_500, "1,788,682.5 TFLOPS"),
])
def test_tflops_text(milli: int, text: str) -> None:
    assert quantity.tflops_text(milli) == text


@pytest.mark.parametrize(("value", "text"), [
    (73_014_444_032, "68 GiB"), (19_531_250 * 1024, "18.63 GiB"), (4 * 2**30, "4 GiB"), (512 * 2**20, "512 MiB"),
    (1500, "1.46 KiB"), (0, "0 GiB"), (7, "7 bytes"),
])
def test_vram_text(value: int, text: str) -> None:
    assert quantity.vram_text(value) == text


def test_percent_and_share() -> None:
    assert quantity.percent_text(12_500) == "12.5 %" and quantity.share_text(20, 15) == "133.3 %"
    assert quantity.share_text(1, 0) == ""


@given(st.integers(min_value=0, max_value=10**13))
def test_tflops_text_is_exact_to_the_milli(milli: int) -> None:
    shown = quantity.tflops_text(milli).removesuffix(" TFLOPS").replace(",", "")
    assert Decimal(shown) * 1000 == milli


@pytest.mark.parametrize("text", ["１０", "١٠", "1０Gi", "５00m"])
def test_non_ascii_digits_are_not_a_quantity(text: str) -> None:
    with pytest.raises(quantity.QuantityError):
        quantity.parse(text)
