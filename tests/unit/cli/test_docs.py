"""The user docs of the CLI area: docs/annotations.md documents every ``tensor-fusion.ai/*`` key
the parser knows, and neither they nor the CLI's code cite files that are not in the repository."""

from __future__ import annotations

import re
from pathlib import Path

from services.podspec import keys

ROOT = Path(__file__).resolve().parents[3]
OUTSIDE = re.compile(r"DESIGN\.md|\bspec/[a-z-]+\.md|/work/share[d]|\bshared/(?:spec|data)\b")


def test_every_annotation_key_is_documented() -> None:
    text = (ROOT / "docs/annotations.md").read_text()
    names = [value for name, value in vars(keys).items()
             if name.isupper() and isinstance(value, str) and value.startswith(keys.DOMAIN + "/")]
    assert len(names) > 30
    short = {name.removeprefix(keys.DOMAIN + "/") for name in names}
    missing = sorted(n for n in short if f"tensor-fusion.ai/{n}`" not in text and f"`{n}`" not in text)
    assert missing == []


def test_every_tensorfusion_key_gpuledger_ignores_is_documented() -> None:
    from services.podspec.known import UNUSED

    text = (ROOT / "docs/annotations.md").read_text()
    section = text[text.index("## Unknown and unused keys"):text.index("## Names")]
    missing = sorted(k for k in UNUSED if f"`{k.removeprefix(keys.DOMAIN + '/')}`" not in section)
    assert missing == []


def test_cli_docs_and_help_cite_nothing_outside_the_repository() -> None:
    files = [*(ROOT / "services/cli").glob("*.py"), ROOT / "README.md", ROOT / "docs/annotations.md",
             ROOT / "docs/sql.md", ROOT / "services/trace/replay.py", ROOT / "services/trace/replay_report.py"]
    cited = {str(f.relative_to(ROOT)): OUTSIDE.findall(f.read_text()) for f in files}
    assert {f: c for f, c in cited.items() if c} == {}
