"""Admission settings from the environment, ``gpuledger admission`` bad input, self-signed TLS."""

from __future__ import annotations

import json
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from typer.testing import CliRunner

from services.admission import tls
from services.admission.settings import load_settings
from services.cli.main import app
from services.shared.settings import SettingsError


def test_settings_read_the_environment_and_reject_a_bad_policy() -> None:
    env = {"GPULEDGER_NATS_URL": "nats://bus:4222", "GPULEDGER_ADMISSION_PORT": "8443",
           "GPULEDGER_ADMISSION_FAILURE_POLICY": "ignore", "GPULEDGER_ADMISSION_KUBE": "false"}
    settings = load_settings(environ=env)
    assert (settings.nats_url, settings.port, settings.failure_policy, settings.kube) == (
        "nats://bus:4222", 8443, "ignore", False)
    with pytest.raises(SettingsError, match="GPULEDGER_ADMISSION_FAILURE_POLICY"):
        load_settings(environ={"GPULEDGER_ADMISSION_FAILURE_POLICY": "allow"})


def test_cli_bad_setting_exits_2_with_json_error() -> None:
    result = CliRunner().invoke(app, ["admission", "--failure-policy", "maybe", "--json"])
    assert result.exit_code == 2
    assert "GPULEDGER_ADMISSION_FAILURE_POLICY" in json.loads(result.stdout)["error"]


def test_self_signed_pair_loads_and_names_its_hosts(tmp_path: Path) -> None:
    cert, key = tls.generate_self_signed(tmp_path, hosts=["webhook.ns.svc", "127.0.0.1"])
    assert isinstance(tls.server_context(cert, key_file=key), ssl.SSLContext)
    names = x509.load_pem_x509_certificate(cert.read_bytes()).extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["webhook.ns.svc"]
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert key.stat().st_mode & 0o077 == 0
