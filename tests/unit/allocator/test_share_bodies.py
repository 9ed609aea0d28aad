"""The body of PUT /api/v1/shares/{name} (services.allocator.api.bodies.share): the ``spec`` a GET
answers reads back as the same share, and hostile input is refused naming the field and the value."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.values import ShareAmount, SharePool, ShareSpec
from services.allocator.api import bodies, documents
from services.allocator.api.bounds import ApiError

_AMOUNTS = st.builds(ShareAmount, milli_tflops=st.none() | st.integers(0, 10**9),
                     vram_bytes=st.none() | st.integers(0, 2**50), gpus=st.none() | st.integers(0, 10**4))
_NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9]", fullmatch=True)


@st.composite
def _specs(draw: st.DrawFn) -> ShareSpec:
    pools = draw(st.lists(_NAMES, max_size=3, unique=True))
    return ShareSpec(namespaces=tuple(draw(st.lists(_NAMES, max_size=3, unique=True))),
                     parent=draw(st.just("") | _NAMES), weight=draw(st.integers(1, 1000)),
                     pools=tuple(SharePool(pool=p, guaranteed=draw(_AMOUNTS),
                                           borrowing_limit=draw(st.none() | _AMOUNTS),
                                           lending_limit=draw(st.none() | _AMOUNTS)) for p in pools))


@given(_specs())
def test_the_spec_a_get_answers_puts_back_the_same_share(spec: ShareSpec) -> None:
    assert bodies.share(documents.share_spec_doc(spec)) == spec


@pytest.mark.parametrize(("body", "field", "value"), [
    ({"weight": 0}, "weight", "'0'"), ({"weight": True}, "weight", "'True'"),
    ({"namespaces": "team-a"}, "namespaces", ""), ({"namespaces": ["A B"]}, "namespaces.0", "'A B'"),
    ({"namespaces": ["a", "a"]}, "namespaces", "'a'"), ({"parent": "X"}, "parent", "'X'"),
    ({"parent": 7}, "parent", "'7'"), ({"parent": 0}, "parent", "'0'"), ({"pools": {}}, "pools", ""),
    ({"namespaces": {}}, "namespaces", ""), ({"pools": [{}]}, "pools.0.pool", "'None'"),
    ({"pools": [{"pool": "a/b"}]}, "pools.0.pool", "'a/b'"),
    ({"pools": [{"pool": "p"}, {"pool": "p"}]}, "pools", "'p'"),
    ({"pools": [{"pool": "p", "guaranteed": {"gpus": -1}}]}, "pools.0.guaranteed.gpus", "'-1'"),
    ({"pools": [{"pool": "p", "guaranteed": {"vram": "lots"}}]}, "pools.0.guaranteed.vram", "'lots'"),
    ({"pools": [{"pool": "p", "lending_limit": {"tflops": "-5"}}]}, "pools.0.lending_limit.tflops", "'-5'"),
    ({"pools": [{"pool": "p", "borrowing_limit": {"cpu": 1}}]}, "pools.0.borrowing_limit.cpu", "'cpu'"),
    ({"pools": [{"pool": "p", "guaranteed": {"tflops": "1e30"}}]}, "pools.0.guaranteed.tflops", "'1e30'"),
    ({"queue": "x"}, "body.queue", "'queue'"),
])
def test_hostile_input_is_400_naming_the_field_and_value(body: dict[str, Any], field: str, value: str) -> None:
    with pytest.raises(ApiError) as caught:
        bodies.share(body)
    assert caught.value.status == 400 and caught.value.field == field
    assert value in str(caught.value)
