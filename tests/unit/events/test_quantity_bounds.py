"""Quantity strings are bounded: length and exponent, so no input reaches a Decimal overflow."""

from __future__ import annotations

import pytest

from events import quantity


@pytest.mark.parametrize("text", ["1e999999999", "1e-31", "1e31", "9" * 65, "1" + "0" * 64, "1e" + "9" * 60])
def test_out_of_range_quantities_are_quantity_errors_quoting_the_text(text: str) -> None:
    with pytest.raises(quantity.QuantityError) as info:
        quantity.to_milli(text)
    assert text[:20] in str(info.value) and len(str(info.value)) < 200


@pytest.mark.parametrize(("text", "milli"), [("1e30", 10**33), ("1e-30", 1), ("9" * 64, int("9" * 64) * 1000),
                                             ("8Ei", 8 * 2**60 * 1000), ("0.000000001", 1)])
def test_boundary_quantities_are_exact(text: str, milli: int) -> None:
    assert quantity.to_milli(text) == milli
