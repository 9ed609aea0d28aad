"""Every intent the reader's HTTP API publishes is one the NATS ``api`` user may publish (deploy/base/
auth.conf): a write route whose intent is missing there answers 5xx in production only (the embedded
stack's user may publish every intent), which no other test would see."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from events import codec
from events.intents import INTENT_TYPES

ROOT = Path(__file__).resolve().parents[2]
READ_SIDE = ROOT / "services" / "allocator" / "api"


def _published_by_the_reader() -> set[str]:
    """The tags of the intent classes constructed anywhere in services/allocator/api (outside whatif,
    which rebuilds intents from the log and publishes none)."""
    names = {cls.__name__: codec.tag_of(cls) for cls in INTENT_TYPES}
    found: set[str] = set()
    for path in READ_SIDE.rglob("*.py"):
        if "whatif" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
                if name in names:
                    found.add(names[name])
    return found


def _api_user_grants() -> set[str]:
    text = (ROOT / "deploy" / "base" / "auth.conf").read_text()
    block = text[text.index("user: api"):]
    block = block[:block.index("subscribe:")]
    return set(re.findall(r'"gpuledger\.intent\.([a-z_]+)"', block))


def test_the_api_user_may_publish_every_intent_the_reader_writes() -> None:
    published = _published_by_the_reader()
    assert {"request_allocation", "set_quota", "set_share", "remove_pool", "start_defrag"} <= published
    assert published - _api_user_grants() == set()


def test_the_api_user_may_publish_nothing_the_reader_does_not_write() -> None:
    assert _api_user_grants() - _published_by_the_reader() == set()
