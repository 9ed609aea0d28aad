"""Typed settings from the environment: one msgspec Struct per service, read once at start.

A field ``foo_bar`` of a settings Struct with prefix ``GPULEDGER_`` reads ``GPULEDGER_FOO_BAR``;
values are converted to the field's type and a bad value raises :class:`SettingsError` naming
the variable.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TypeVar

import msgspec

T = TypeVar("T", bound=msgspec.Struct)

DATABASE_URL_ENV = "GPULEDGER_DATABASE_URL"
NATS_URL_ENV = "GPULEDGER_NATS_URL"


class SettingsError(ValueError):
    """An environment variable holds a value of the wrong type; the message names it."""


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
