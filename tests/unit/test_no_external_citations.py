"""Nothing in the repository cites documents its users do not have.

Code, docs, tests and ``--help`` texts cite TensorFusion's source files, the ATC'23 paper and its
simulator, or the project's own docs; never the private design notes, their section numbers or the
shared workspace. The patterns are assembled from pieces so that this file does not match itself.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_SECTION = "\u00a7"
_NOTES = "|".join(re.escape(name + ".md") for name in (
    "DESIGN", "admission", "allocator", "autoscaler_" + "discovery", "fgd", "background", "tf-" + "quirks",
    "style"))
_PATTERNS = {
    "section sign": re.escape(_SECTION),
    "design note": r"(?<![\w/.-])(?:spec/)?(?:" + _NOTES + r")\b",
    "spec directory": r"\bspec" + r"/[\w-]+\.md\b",
    "notes by name": r"\bautoscaler_" + r"discovery\b|\btf-" + r"quirks\b",
    "shared workspace": r"/work/" + r"shared\b|(?<![\w/])shared/(?:spec|data)\b",
    "spec section or case": r"\b[Ss]pec" + r":? (?:" + re.escape(_SECTION) + r")?[A-Z]{0,2}\.?\d",
    "case lists": r"\b[Ss]pec" + r" (?:cases?|part)\b",
    "named spec": r"\b(?:admission|allocator|autoscaler)" + r" spec\b",
    "numbered quirk": r"\bquirk" + r" Q\d",
}
_FORBIDDEN = re.compile("|".join(f"(?P<p{i}>{p})" for i, p in enumerate(_PATTERNS.values())))
_NAMES = list(_PATTERNS)


def _tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / name for name in out.decode().split("\0") if name]


def _text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):  # deleted in the work tree, or a submodule
        return None
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _hits(text: str) -> list[tuple[int, str, str]]:
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in _FORBIDDEN.finditer(line):
            name = _NAMES[int(next(k for k, v in match.groupdict().items() if v is not None)[1:])]
            found.append((number, name, match.group(0)))
    return found


def test_the_patterns_catch_what_they_are_for() -> None:
    samples = ["see " + "DESIGN" + ".md", "spec" + "/admission.md cases C33", "(" + _SECTION + "A.9)",
               "spec" + " A23", "admission" + " spec", "Spec" + " cases A4-A9", "/work/" + "shared/x",
               "autoscaler_" + "discovery.md part A", "quirk" + " Q2"]
    assert [s for s in samples if not _hits(s)] == []
    fine = ["docs/allocation.md", "services/shared/settings.py", "/spec/containers/0", "spec: {}",
            "internal/autoscaler/recommender/percentile_recommender.go", "test_spec_cases_resources.py"]
    assert [s for s in fine if _hits(s)] == []


def test_no_tracked_file_cites_documents_users_do_not_have() -> None:
    files = _tracked_text_files()
    assert len(files) > 100
    problems = []
    for path in files:
        text = _text(path)
        if text is None:
            continue
        for number, name, matched in _hits(text):
            problems.append(f"{path.relative_to(ROOT)}:{number}: {name}: {matched!r}")
    assert problems == [], "\n".join(problems)
