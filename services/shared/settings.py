"""Typed settings from the environment: one msgspec Struct per service, read once at start.

A field ``foo_bar`` of a settings Struct with prefix ``GPULEDGER_`` reads ``GPULEDGER_FOO_BAR``;
values are converted to the field's type and a bad value raises :class:`SettingsError` naming
the variable.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TypeVar

import msgspec

T = TypeVar("T", bound=msgspec.Struct)

DATABASE_URL_ENV = "GPULEDGER_DATABASE_URL"
NATS_URL_ENV = "GPULEDGER_NATS_URL"


class SettingsError(ValueError):
    """An environment variable holds a bad value; the message names it, ``field`` too when known."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


def env_name(prefix: str, field: str) -> str:
    """The variable a field reads: ``env_name("GPULEDGER_", "nats_url") == "GPULEDGER_NATS_URL"``."""
    return f"{prefix}{field}".upper()


def load(
    cls: type[T], *, prefix: str = "GPULEDGER_", environ: Mapping[str, str] | None = None, **overrides: object
) -> T:
    """Build ``cls`` from defaults, then environment variables, then explicit ``overrides``."""
    env = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for field in msgspec.structs.fields(cls):
        name = env_name(prefix, field.name)
        if name in env:
            values[field.name] = env[name]
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return msgspec.convert(values, cls, strict=False)
    except msgspec.ValidationError as exc:
        raise SettingsError(f"invalid setting ({prefix}*): {exc}") from exc


INBOX_PREFIX = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*")
"""What a reply-inbox prefix may be: subject tokens without wildcards."""

NATS_PREFIX = "GPULEDGER_NATS_"
"""Prefix of the NATS security settings, the same for every service and the CLI."""


class NatsSecurity(msgspec.Struct, kw_only=True, frozen=True):
    """How a client authenticates to NATS and verifies it: one settings block for every service.

    At most one identity: ``user`` + ``password`` (or ``password_file``), ``token`` (or
    ``token_file``), ``nkey_seed_file`` (an NKey seed, ``SU...``) or ``creds_file`` (a JWT
    ``.creds`` file of an operator-mode account). TLS: ``tls_ca`` (PEM bundle the server's
    certificate must chain to; setting it turns TLS on), ``tls_cert`` + ``tls_key`` (a client
    certificate for servers that verify clients). ``inbox_prefix``: the first subject token of this
    client's reply inboxes (default ``_INBOX``); a distinct prefix per user lets the server's
    permissions keep each service's JetStream replies from the others (deploy/base/auth.conf).
    Paths are files; empty means unset. Loaded by :func:`nats_security`, which reads every file
    once and names the variable of a bad one.
    """

    user: str = ""
    password: str = ""
    password_file: str = ""
    token: str = ""
    token_file: str = ""
    nkey_seed_file: str = ""
    creds_file: str = ""
    tls_ca: str = ""
    tls_cert: str = ""
    tls_key: str = ""
    inbox_prefix: str = ""

    def __repr__(self) -> str:
        shown = {f: ("***" if f in ("password", "token") else getattr(self, f))
                 for f in self.__struct_fields__ if getattr(self, f)}
        return f"NatsSecurity({shown})"

    @property
    def identity(self) -> str:
        """``"user"``, ``"token"``, ``"nkey"``, ``"creds"`` or ``""`` (anonymous)."""
        return _identities(self)[0] if _identities(self) else ""

    @property
    def tls(self) -> bool:
        """True when the connection must use TLS."""
        return bool(self.tls_ca or self.tls_cert)


def _identities(security: NatsSecurity) -> list[str]:
    found = [("user", bool(security.user)), ("token", bool(security.token)),
             ("nkey", bool(security.nkey_seed_file)), ("creds", bool(security.creds_file))]
    return [name for name, present in found if present]


def _read_secret(variable: str, path: str) -> str:
    """The stripped content of secret file ``path``; SettingsError naming ``variable`` otherwise."""
    content = _read_file(variable, path).strip()
    if not content:
        raise SettingsError(f"{variable}: file {path} is empty", field=variable)
    return content


def _read_file(variable: str, path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{variable}: cannot read {path}: {exc}", field=variable) from exc


def _nats_var(field: str) -> str:
    return env_name(NATS_PREFIX, field)


def nats_security(environ: Mapping[str, str] | None = None, **overrides: object) -> NatsSecurity:
    """The ``GPULEDGER_NATS_*`` security settings, with secret files read and every path checked.

    ``password_file``/``token_file`` are read into ``password``/``token``. Raises SettingsError
    naming the variable when a file is missing, unreadable or empty, when a password comes
    without a user (or the reverse), when ``tls_cert`` and ``tls_key`` are not given together,
    or when more than one identity (user, token, NKey, creds) is set.
    """
    loaded = load(NatsSecurity, prefix=NATS_PREFIX, environ=environ, **overrides)
    changes: dict[str, str] = {}
    for secret_file, secret in (("password_file", "password"), ("token_file", "token")):
        path = getattr(loaded, secret_file)
        if path:
            if getattr(loaded, secret):
                raise SettingsError(f"{_nats_var(secret)} and {_nats_var(secret_file)} are both set: use one",
                                    field=_nats_var(secret_file))
            changes[secret] = _read_secret(_nats_var(secret_file), path)
    for field in ("nkey_seed_file", "creds_file", "tls_ca", "tls_cert", "tls_key"):
        if getattr(loaded, field):
            _read_file(_nats_var(field), getattr(loaded, field))
    security = msgspec.structs.replace(loaded, **changes)
    if security.user and not security.password:
        raise SettingsError(f"{_nats_var('user')} is set but neither {_nats_var('password')} "
                            f"nor {_nats_var('password_file')}", field=_nats_var("password"))
    if security.password and not security.user:
        raise SettingsError(f"a NATS password is set but {_nats_var('user')} is not", field=_nats_var("user"))
    if bool(security.tls_cert) != bool(security.tls_key):
        missing = "tls_key" if security.tls_cert else "tls_cert"
        raise SettingsError(f"{_nats_var(missing)} is not set: a client certificate needs both "
                            f"{_nats_var('tls_cert')} and {_nats_var('tls_key')}", field=_nats_var(missing))
    if security.inbox_prefix and not INBOX_PREFIX.fullmatch(security.inbox_prefix):
        raise SettingsError(f"{_nats_var('inbox_prefix')}={security.inbox_prefix!r}: letters, digits, '_' and '-' "
                            "in dot-separated tokens, no wildcards", field=_nats_var("inbox_prefix"))
    if len(_identities(security)) > 1:
        raise SettingsError(f"more than one NATS identity is set ({', '.join(_identities(security))}): "
                            f"set one of {_nats_var('user')}, {_nats_var('token')}, "
                            f"{_nats_var('nkey_seed_file')}, {_nats_var('creds_file')}", field=_nats_var("user"))
    return security


def redact_url(url: str) -> str:
    """``url`` with the password of its user-info replaced by ``***`` (for printing and logs)."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest.split("/", 1)[0]:
        return url
    userinfo, host = rest.split("@", 1)
    user = userinfo.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in userinfo else url
