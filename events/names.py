"""Kubernetes object names (RFC 1123), checked the same way at every entry of the contract.

A namespace is a DNS label (Kubernetes ``ValidateNamespaceName``: lowercase ASCII letters, digits
and '-', 1 to 63 characters, starting and ending with a letter or digit). A pod and a pool (a
TensorFusion GPUPool object) are DNS subdomains (``ValidatePodName``, ``NameIsDNSSubdomain``: such
labels joined by '.', at most 253 characters). A pod created from ``generateName`` only carries
the prefix (``train-``) until the API server completes it, so a pod name may end in one '-'
(Kubernetes masks that dash when it validates a prefix). ``Team_B``, ``Upper-Case``, ``a/b``,
``..``, a tab, U+202E or a leading '-' are refused.

Used by the Pod parser (services.podspec), the allocator's HTTP bodies and the CLI before an
intent is published, and by the allocator's decide-time validation for intents from any other
producer. Pure; imports only the standard library.
"""

from __future__ import annotations

import re
from typing import Literal

NameKind = Literal["namespace", "pod", "pool", "share"]
"""Which Kubernetes rule a name follows: ``namespace`` a DNS label, ``pod``, ``pool`` and ``share`` (a
GPUShare object) DNS subdomains."""

MAX_LABEL = 63
"""Characters of a DNS label (RFC 1123)."""

MAX_SUBDOMAIN = 253
"""Characters of a DNS subdomain (RFC 1123)."""

_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", re.ASCII)
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", re.ASCII)

_RULES: dict[NameKind, str] = {
    "namespace": "lowercase letters, digits and '-', 1 to 63 characters, starting and ending with a letter or digit",
    "pod": "lowercase letters, digits, '-' and '.', at most 253 characters, each '.'-separated part starting and "
           "ending with a letter or digit",
    "pool": "lowercase letters, digits, '-' and '.', at most 253 characters, each '.'-separated part starting and "
            "ending with a letter or digit",
    "share": "lowercase letters, digits, '-' and '.', at most 253 characters, each '.'-separated part starting and "
             "ending with a letter or digit",
}
_WHAT: dict[NameKind, str] = {"namespace": "namespace name (an RFC 1123 DNS label)",
                              "pod": "pod name (an RFC 1123 DNS subdomain)",
                              "pool": "pool name (an RFC 1123 DNS subdomain)",
                              "share": "share name (an RFC 1123 DNS subdomain)"}


class InvalidName(ValueError):
    """A name Kubernetes would refuse; ``field`` names where it came from, ``value`` is the name."""

    def __init__(self, message: str, *, field: str, value: str) -> None:
        super().__init__(message)
        self.field = field
        self.value = value


def is_valid(kind: NameKind, text: str) -> bool:
    """True when ``text`` is a valid ``kind`` name (module docstring)."""
    if kind == "namespace":
        return len(text) <= MAX_LABEL and _LABEL.fullmatch(text) is not None
    if kind == "pod" and text.endswith("-"):
        text = text[:-1]  # a generateName prefix: Kubernetes masks the trailing dash
    return len(text) <= MAX_SUBDOMAIN and _SUBDOMAIN.fullmatch(text) is not None  # no per-part bound (k8s)


def problem(kind: NameKind, text: str, *, field: str) -> str | None:
    """The message for an invalid ``kind`` name (naming ``field`` and the value, cut to 80
    characters), or None when it is valid."""
    if is_valid(kind, text):
        return None
    shown = text if len(text) <= 80 else text[:80] + "…"
    return f"{field} {shown!r} is not a valid Kubernetes {_WHAT[kind]}: {_RULES[kind]}"


def check(kind: NameKind, text: str, *, field: str) -> str:
    """``text`` when it is a valid ``kind`` name; else raises :class:`InvalidName` naming ``field``."""
    message = problem(kind, text, field=field)
    if message is not None:
        raise InvalidName(message, field=field, value=text)
    return text
