"""The GPULEDGER_NATS_* security settings: files read once, every bad value named by its variable,
and the nats-py options they turn into."""

from __future__ import annotations

import ssl
import stat
from pathlib import Path

import pytest
import trustme

from services.shared import lifecycle, messaging, secretfile
from services.shared.settings import NatsSecurity, SettingsError, nats_security, redact_url


def _file(tmp_path: Path, name: str, content: str) -> str:
    path = tmp_path / name
    path.write_text(content)
    return str(path)


@pytest.mark.parametrize("variable", ["GPULEDGER_NATS_PASSWORD_FILE", "GPULEDGER_NATS_TOKEN_FILE",
                                      "GPULEDGER_NATS_NKEY_SEED_FILE", "GPULEDGER_NATS_CREDS_FILE",
                                      "GPULEDGER_NATS_TLS_CA"])
def test_a_missing_file_is_an_error_naming_its_variable(variable: str, tmp_path: Path) -> None:
    environ = {variable: str(tmp_path / "absent"), "GPULEDGER_NATS_USER": "admission"}
    if variable != "GPULEDGER_NATS_PASSWORD_FILE":
        environ.pop("GPULEDGER_NATS_USER")
    with pytest.raises(SettingsError, match=rf"^{variable}: cannot read {tmp_path / 'absent'}") as caught:
        nats_security(environ)
    assert caught.value.field == variable


def test_an_unreadable_or_empty_secret_file_is_named(tmp_path: Path) -> None:
    empty = _file(tmp_path, "empty", "\n")
    with pytest.raises(SettingsError, match=r"^GPULEDGER_NATS_TOKEN_FILE: file .* is empty"):
        nats_security({"GPULEDGER_NATS_TOKEN_FILE": empty})
    with pytest.raises(SettingsError, match=r"^GPULEDGER_NATS_TOKEN_FILE: cannot read"):
        nats_security({"GPULEDGER_NATS_TOKEN_FILE": str(tmp_path)})  # a directory


def test_secret_files_are_read_and_stripped(tmp_path: Path) -> None:
    password = _file(tmp_path, "password", "s3cret\n")
    loaded = nats_security({"GPULEDGER_NATS_USER": "discovery", "GPULEDGER_NATS_PASSWORD_FILE": password})
    assert (loaded.user, loaded.password, loaded.identity) == ("discovery", "s3cret", "user")
    assert "s3cret" not in repr(loaded)
    token = nats_security({"GPULEDGER_NATS_TOKEN_FILE": _file(tmp_path, "token", " t0k\n")})
    assert (token.token, token.identity) == ("t0k", "token")
    assert nats_security({}).identity == "" and not nats_security({}).tls


@pytest.mark.parametrize(("environ", "message"), [
    ({"GPULEDGER_NATS_USER": "a"}, "GPULEDGER_NATS_USER is set but neither GPULEDGER_NATS_PASSWORD"),
    ({"GPULEDGER_NATS_PASSWORD": "p"}, "GPULEDGER_NATS_USER is not"),
    ({"GPULEDGER_NATS_USER": "a", "GPULEDGER_NATS_PASSWORD": "p", "GPULEDGER_NATS_TOKEN": "t"},
     r"more than one NATS identity is set \(user, token\)"),
    ({"GPULEDGER_NATS_TOKEN": "t", "GPULEDGER_NATS_TOKEN_FILE": "/etc/hostname"},
     "GPULEDGER_NATS_TOKEN and GPULEDGER_NATS_TOKEN_FILE are both set"),
    ({"GPULEDGER_NATS_TLS_CERT": "/etc/hostname"}, "GPULEDGER_NATS_TLS_KEY is not set"),
    ({"GPULEDGER_NATS_INBOX_PREFIX": "_INBOX.>"}, r"GPULEDGER_NATS_INBOX_PREFIX='_INBOX\.>': .* no wildcards"),
    ({"GPULEDGER_NATS_INBOX_PREFIX": "_INBOX."}, "GPULEDGER_NATS_INBOX_PREFIX"),
])
def test_inconsistent_settings_are_refused_naming_the_variables(environ: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        nats_security(environ)


def test_each_identity_maps_to_its_nats_py_option(tmp_path: Path) -> None:
    seed, creds = _file(tmp_path, "seed", "SU..."), _file(tmp_path, "creds", "jwt")
    assert messaging.connect_options(NatsSecurity()) == {}
    assert messaging.connect_options(NatsSecurity(user="u", password="p")) == {"user": "u", "password": "p"}
    assert messaging.connect_options(NatsSecurity(token="t")) == {"token": "t"}
    assert messaging.connect_options(NatsSecurity(nkey_seed_file=seed)) == {"nkeys_seed": seed}
    assert messaging.connect_options(NatsSecurity(creds_file=creds)) == {"user_credentials": creds}
    assert messaging.connect_options(nats_security({"GPULEDGER_NATS_INBOX_PREFIX": "_INBOX_admission"})) == {
        "inbox_prefix": "_INBOX_admission"}


def test_tls_settings_build_a_verifying_context_with_the_client_certificate(tmp_path: Path) -> None:
    ca = trustme.CA()
    ca_file, client = tmp_path / "ca.pem", ca.issue_cert("allocator")
    ca.cert_pem.write_to_path(str(ca_file))
    client.cert_chain_pems[0].write_to_path(str(tmp_path / "cert.pem"))
    client.private_key_pem.write_to_path(str(tmp_path / "key.pem"))
    security = nats_security({"GPULEDGER_NATS_TLS_CA": str(ca_file),
                              "GPULEDGER_NATS_TLS_CERT": str(tmp_path / "cert.pem"),
                              "GPULEDGER_NATS_TLS_KEY": str(tmp_path / "key.pem")})
    context = messaging.connect_options(security)["tls"]
    assert isinstance(context, ssl.SSLContext) and context.verify_mode == ssl.CERT_REQUIRED
    assert context.check_hostname and len(context.get_ca_certs()) == 1
    not_pem = _file(tmp_path, "not-pem", "hello")
    with pytest.raises(SettingsError, match=r"^GPULEDGER_NATS_TLS_CA: .* is not a PEM CA bundle"):
        messaging.tls_context(NatsSecurity(tls_ca=not_pem))
    with pytest.raises(SettingsError, match="GPULEDGER_NATS_TLS_CERT/GPULEDGER_NATS_TLS_KEY"):
        messaging.tls_context(NatsSecurity(tls_ca=str(ca_file), tls_cert=not_pem, tls_key=not_pem))


def test_redact_url_hides_only_the_password() -> None:
    assert redact_url("nats://gpuledger:pw@127.0.0.1:4222") == "nats://gpuledger:***@127.0.0.1:4222"
    assert redact_url("postgresql://postgres:a%40b@h:5/db") == "postgresql://postgres:***@h:5/db"
    assert redact_url("nats://127.0.0.1:4222") == "nats://127.0.0.1:4222"
    assert redact_url("postgresql://postgres@h/db") == "postgresql://postgres@h/db"


def test_a_generated_secret_is_private_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "secrets" / "nats-password"
    first = secretfile.ensure(path)
    assert len(first) == 43 and secretfile.ensure(path) == first
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    path.chmod(0o644)
    assert secretfile.ensure(path) == first and stat.S_IMODE(path.stat().st_mode) == 0o600
    path.write_text("")
    with pytest.raises(secretfile.SecretFileError, match="is empty"):
        secretfile.ensure(path)


def test_a_service_with_a_bad_nats_setting_exits_2_before_starting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    started: list[bool] = []

    async def main(stop: object) -> None:
        started.append(True)

    monkeypatch.setenv("GPULEDGER_NATS_NKEY_SEED_FILE", str(tmp_path / "absent.nk"))
    with pytest.raises(SystemExit) as caught:
        lifecycle.run_service(main)
    assert caught.value.code == 2 and not started
    assert "(field: GPULEDGER_NATS_NKEY_SEED_FILE)" in capsys.readouterr().err
