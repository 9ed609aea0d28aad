"""``gpuledger up``'s API token (services/cli/stack.py ensure_api_token): generated once in
``D/secrets/api-token`` (0600), served through GPULEDGER_API_TOKEN_FILE, found by the CLI in the
data dir; an explicit token in the environment or ``--no-token`` generates nothing."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from services.allocator import http
from services.cli import endpoints, stack


@pytest.fixture(autouse=True)
def _no_token_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (http.TOKEN_ENV, http.TOKEN_FILE_ENV):
        monkeypatch.setenv(name, "")  # recorded, so what ensure_api_token exports is undone after the test
        monkeypatch.delenv(name)


def test_up_generates_a_token_once_and_the_cli_finds_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = stack.ensure_api_token(tmp_path, wanted=True)
    assert path == tmp_path / "secrets" / "api-token"
    token = path.read_text().strip()
    assert len(token) >= 43 and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert http.token_from_env() == token  # what the servers of the up process read
    monkeypatch.delenv(http.TOKEN_FILE_ENV)  # a later `up` on the same data dir keeps the token
    assert stack.ensure_api_token(tmp_path, wanted=True) == path and path.read_text().strip() == token
    endpoints.write(tmp_path, endpoints.Endpoints(allocator_http="http://127.0.0.1:1"))
    assert endpoints.read(tmp_path).api_token == token
    assert token not in (tmp_path / endpoints.ENDPOINTS_FILE).read_text()


def test_an_explicit_token_or_no_token_generates_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert stack.ensure_api_token(tmp_path, wanted=False) is None
    monkeypatch.setenv(http.TOKEN_ENV, "given")
    assert stack.ensure_api_token(tmp_path, wanted=True) is None
    assert not (tmp_path / "secrets").exists() and http.token_from_env() == "given"
