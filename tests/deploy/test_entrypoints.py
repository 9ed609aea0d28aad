"""The image's entry points resolve: the ``gpuledger`` console script, every service command the
compose file and the manifests run (with the options they pass), and ``python -m services.<service>``.
The Dockerfile itself is checked for what issue 9 asks: multi-stage, slim base, non-root, health check.
"""

from __future__ import annotations

import fnmatch
import importlib
import importlib.util
import json
import shlex
import tomllib
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from tests.deploy.conftest import OVERLAYS, REPO, Obj, pod_spec, workloads

SERVICES = ("allocator", "admission", "discovery", "autoscaler")


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    lines, current = [], ""
    for raw in (REPO / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        current += " " + line.removesuffix("\\").strip()
        if not line.endswith("\\"):
            lines.append(current.strip())
            current = ""
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def _exec_form(arguments: str) -> list[str]:
    value = json.loads(arguments)
    assert isinstance(value, list), f"not exec form: {arguments}"
    return [str(v) for v in value]


def test_dockerfile_is_multi_stage_slim_and_non_root() -> None:
    instructions = dockerfile_instructions()
    froms = [args for op, args in instructions if op == "FROM"]
    assert len(froms) >= 2, "multi-stage: a build stage and a runtime stage"
    base = next(args.split("=", 1)[1] for op, args in instructions if op == "ARG" and args.startswith("PYTHON_IMAGE="))
    assert base.startswith("python:3.11") and "slim" in base
    user = [args for op, args in instructions if op == "USER"][-1]
    assert user.split(":")[0] not in ("0", "root")
    assert _exec_form(next(a for op, a in instructions if op == "ENTRYPOINT")) == ["gpuledger"]
    healthcheck = next(a for op, a in instructions if op == "HEALTHCHECK")
    assert "CMD" in healthcheck and "GPULEDGER_HEALTHCHECK_URL" in healthcheck


def _dockerignore_allows(path: str) -> bool:
    allowed = True
    for pattern in (REPO / ".dockerignore").read_text().splitlines():
        pattern = pattern.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate, pattern = pattern.startswith("!"), pattern.lstrip("!").rstrip("/")
        if pattern == "**" or fnmatch.fnmatch(path, pattern) or path.startswith(pattern + "/"):
            allowed = negate
    return allowed


def test_everything_the_dockerfile_copies_exists_and_is_in_the_build_context() -> None:
    for op, args in dockerfile_instructions():
        if op != "COPY" or "--from=" in args:
            continue
        *sources, _ = [a for a in shlex.split(args) if not a.startswith("--")]
        for source in sources:
            assert (REPO / source).exists(), f"COPY {source}: not in the repository"
            assert _dockerignore_allows(source), f"COPY {source}: excluded by .dockerignore"


def test_console_script_is_the_image_entry_point() -> None:
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, attribute = scripts["gpuledger"].partition(":")
    assert callable(getattr(importlib.import_module(module), attribute))


def _commands_run(rendered: dict[str, list[Obj]]) -> list[tuple[str, list[str]]]:
    """(where, argv after `gpuledger`) of every container running the image, in compose and the overlays."""
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    found = [(f"compose {name}", [str(a) for a in s["command"]]) for name, s in compose["services"].items()
             if s.get("image") == "gpuledger:dev"]
    for overlay in OVERLAYS:
        for w in workloads(rendered[overlay]):
            spec: dict[str, Any] = pod_spec(w)
            for c in spec.get("initContainers", []) + spec["containers"]:
                if c["image"].split(":")[0].endswith("gpuledger"):
                    found.append((f"{overlay} {w['metadata']['name']}/{c['name']}", c["args"]))
    return found


def test_every_command_the_deployments_run_exists_with_its_options(rendered: dict[str, list[Obj]]) -> None:
    from services.cli.main import app

    runner = CliRunner()
    commands = _commands_run(rendered)
    assert {argv[0] for _, argv in commands} == {*SERVICES, "api", "migrate"}
    for where, argv in commands:
        result = runner.invoke(app, [*argv, "--help"])
        assert result.exit_code == 0, f"{where}: `gpuledger {' '.join(argv)}` does not parse:\n{result.output}"


def test_the_readers_python_dash_m_entry_point_exists() -> None:
    """``gpuledger api`` is ``python -m services.allocator.reader`` (``gpuledger up`` starts it so)."""
    spec = importlib.util.find_spec("services.allocator.reader")
    assert spec is not None and spec.origin
    assert '__name__ == "__main__"' in (REPO / "services" / "allocator" / "reader.py").read_text()


@pytest.mark.parametrize("service", SERVICES)
def test_python_dash_m_entry_point_exists(service: str) -> None:
    spec = importlib.util.find_spec(f"services.{service}.__main__")
    assert spec is not None and spec.origin, f"`python -m services.{service}` has no __main__ module"
    source = (REPO / "services" / service / "__main__.py").read_text()
    compile(source, spec.origin, "exec")
    assert '__name__ == "__main__"' in source or "__name__ == '__main__'" in source or "main(" in source
