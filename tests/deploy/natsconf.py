"""The NATS configuration of deploy/ as a test can run it: the rendered ConfigMap gpuledger-nats-config
(nats.conf including auth.conf) with test passwords in the server's environment and a test CA made with
trustme in place of cert-manager's certificate. A single test server keeps everything but the cluster
routes, the monitor listener and the pod's fixed paths.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path

import trustme

from tests.deploy.conftest import Obj

USERS = ("allocator", "admission", "discovery", "autoscaler", "agent", "operator", "api")
"""The users auth.conf defines with a password of their own (the keys of Secret gpuledger-nats-auth)."""
SHARED_PASSWORD = {"autoscaler_checkpoints": "autoscaler"}
"""auth.conf's other users -> the user whose password they log in with (a second connection of its service)."""

TLS_DIR_IN_POD = "/etc/nats-tls/"


def config_files(objects: list[Obj]) -> dict[str, str]:
    """File name -> content of the rendered ConfigMap gpuledger-nats-config (nats.conf, auth.conf)."""
    (config,) = [o for o in objects if o["kind"] == "ConfigMap"
                 and o["metadata"]["name"].startswith("gpuledger-nats-config")]
    files: dict[str, str] = config["data"]
    return files


def fresh_passwords() -> dict[str, str]:
    """A fresh random password per user, of the documented form: a letter, then hex digits
    (nats-server parses a variable's value as a configuration value: ``3f...`` would be a number)."""
    return {user: f"p{secrets.token_hex(16)}" for user in USERS}


def server_environment(passwords: dict[str, str]) -> dict[str, str]:
    """The variables nats.conf and auth.conf read: ``<USER>_PASSWORD`` and ``SERVER_NAME``."""
    return {"SERVER_NAME": "gpuledger-nats-0", **{f"{u.upper()}_PASSWORD": p for u, p in passwords.items()}}


def write_tls(directory: Path) -> trustme.CA:
    """A test CA and a server certificate for localhost/127.0.0.1, as cert-manager's Secret holds them
    (``tls.crt``, ``tls.key``, ``ca.crt``) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    server = ca.issue_cert("localhost", "127.0.0.1", "gpuledger-nats")
    server.cert_chain_pems[0].write_to_path(str(directory / "tls.crt"))
    server.private_key_pem.write_to_path(str(directory / "tls.key"))
    ca.cert_pem.write_to_path(str(directory / "ca.crt"))
    return ca


def with_tls_dir(text: str, tls_dir: Path) -> str:
    """``text`` reading its certificates from ``tls_dir`` instead of the pod's mount."""
    return text.replace(TLS_DIR_IN_POD, f"{tls_dir}/")


def single_server_config(files: dict[str, str], tls_dir: Path) -> str:
    """nats.conf with auth.conf inlined, certificates from ``tls_dir``, and without what only a pod
    has: the cluster routes, the monitor port, the pid file, the store path (NatsServer passes its own
    host, port and store on the command line)."""
    text = files["nats.conf"]
    assert "include ./auth.conf" in text, "nats.conf must include auth.conf"
    text = text.replace("include ./auth.conf", files["auth.conf"])
    text = re.sub(r"(?ms)^cluster \{.*?^\}\n?", "", text)
    text = re.sub(r"(?m)^(http|pid_file|listen):.*\n", "", text)
    text = re.sub(r"(?m)^\s*store_dir:.*\n", "", text)
    return with_tls_dir(text, tls_dir)
