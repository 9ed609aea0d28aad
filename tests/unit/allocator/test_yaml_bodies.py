"""YAML bodies read by libyaml are what the pure-Python bounded loader reads (api/parse_worker).

libyaml's composer recurses in C, so the nesting is checked on its parse events first: a document
nested past MAX_DEPTH is refused, never handed to the composer (which would crash the process).
The two paths agree on every document: the same values, or the same refusal.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from services.allocator.api import parse_worker

pytestmark = pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML built without libyaml")


def _both(text: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, Any]:
    fast = parse_worker.parse_checked(text)
    with monkeypatch.context() as patched:
        patched.setattr(yaml, "__with_libyaml__", False)
        pure = parse_worker.parse_checked(text)
    return fast, pure


def _nested(depth: int, flow: bool) -> str:
    if flow:
        return "a: " + "[" * depth + "x" + "]" * depth
    return "- " * depth + "x"


@pytest.mark.parametrize("flow", [False, True])
def test_the_nesting_bound_is_the_same_on_both_paths(monkeypatch: pytest.MonkeyPatch, flow: bool) -> None:
    limit = parse_worker.MAX_DEPTH
    for depth in (limit - 3, limit - 2, limit - 1, limit, limit + 1):
        fast, pure = _both(_nested(depth, flow), monkeypatch)
        assert fast == pure, depth
    # the deepest document taken holds a scalar at MAX_DEPTH; one more level is refused
    taken = limit - 2 if flow else limit - 1  # the flow form's root mapping is one more level
    assert parse_worker.parse_checked(_nested(taken, flow))[1] == 0
    refused = parse_worker.parse_checked(_nested(taken + 1, flow))
    assert refused[1:] == (400, f"body is nested deeper than {limit} levels", "body")


def test_a_document_far_too_deep_for_the_c_composer_is_refused_not_crashed() -> None:
    # 200,000 levels: libyaml's composer would recurse that deep in C and overflow the stack (libyaml
    # 0.2.6 and later refuse flow nesting past 1,000 while scanning, in their own words; block
    # nesting, 2 bytes a level in compact sequences, only the check on the events stops)
    deepest = f"body is nested deeper than {parse_worker.MAX_DEPTH} levels"
    assert parse_worker.parse_checked("- " * 200_000 + "x")[1:] == (400, deepest, "body")
    flow = parse_worker.parse_checked("[" * 200_000 + "]" * 200_000)
    assert flow[1:] == (400, deepest, "body") or ((flow[1], flow[3]) == (400, "body") and "nesting" in flow[2])
    assert parse_worker.parse_checked("a:\n" + "".join(" " * i + "- \n" for i in range(1, 5_000)))[1] == 400


def test_malformed_yaml_and_aliases_are_refused_or_expanded_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    for text in ("a: [1, 2", "a: 1\n---\nb: 2\n", "a: &x [1, {b: 2}]\nc: *x\n", "key: *nowhere\n", ""):
        fast, pure = _both(text, monkeypatch)
        # the same document or the same refusal (libyaml words a syntax error its own way)
        assert (fast[0], fast[1], fast[3]) == (pure[0], pure[1], pure[3]), text
    bomb = "\n".join(["a: &a [x, x, x, x, x, x, x, x, x]"]
                     + [f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)])
    assert parse_worker.parse_checked(bomb)[1] == 400


_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8),
                     st.floats(allow_nan=False))
_documents = st.recursive(_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)), max_leaves=40)


@settings(max_examples=150, deadline=None)
@given(document=_documents, flow=st.booleans())
def test_any_document_reads_the_same_on_both_paths(document: Any, flow: bool) -> None:
    text = yaml.safe_dump({"spec": document}, default_flow_style=flow)
    with pytest.MonkeyPatch.context() as monkeypatch:
        fast, pure = _both(text, monkeypatch)
    assert fast == pure
    assert fast[0] == {"spec": document}


def test_libyaml_reads_the_body_when_present(monkeypatch: pytest.MonkeyPatch) -> None:
    # the pure-Python loader is ~5x the CPU of libyaml on a 1 MiB Pod: it must not be the one used
    def refuse(*_: object) -> None:
        raise AssertionError("the pure-Python loader was used")

    monkeypatch.setattr(parse_worker, "_BoundedLoader", refuse)
    assert parse_worker.parse_checked("kind: Pod\nmetadata: {name: p}\n") == (
        {"kind": "Pod", "metadata": {"name": "p"}}, 0, "", "")
