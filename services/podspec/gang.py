"""Gang scheduling inputs: gang-enabled / gang-min-members / gang-timeout -> stamped gang annotations.

Rules and messages: TensorFusion ``parseGangScheduling`` / ``validateGang`` (TensorFusion
internal/webhook/v1/tf_parser.go).
gpuledger stamps the gang as allocation attributes (``gang-desired-members``,
``gang-required-members``, ``gang-group-key``, ``gang-timeout``), as TensorFusion's webhook does,
and sends it to the allocator as ``AllocationSpec.gang`` (:func:`gang_spec`), which places the
quorum all together or not at all (docs/allocation.md, "Gangs").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from events.values import GangSpec
from services.podspec import keys
from services.podspec.errors import PodSpecError
from services.podspec.fields import parse_duration_s, parse_int32


def _min_members(annotations: Mapping[str, str], profile_gang: Mapping[str, Any]) -> int:
    raw = annotations.get(keys.GANG_MIN_MEMBERS)
    if raw is None:
        value = profile_gang.get("minMembers") or 0
        return int(value) if isinstance(value, int) else 0
    try:
        value = parse_int32(raw)
    except ValueError as exc:
        raise PodSpecError(
            f'invalid {keys.GANG_MIN_MEMBERS} value "{raw}": {exc}', field=keys.GANG_MIN_MEMBERS, value=raw
        ) from None
    if value < 0:
        raise PodSpecError(
            f"invalid {keys.GANG_MIN_MEMBERS}={value}: must be >= 0", field=keys.GANG_MIN_MEMBERS, value=raw
        )
    return value


def _timeout(annotations: Mapping[str, str], profile_gang: Mapping[str, Any]) -> str:
    raw = annotations.get(keys.GANG_TIMEOUT, str(profile_gang.get("timeout") or ""))
    try:
        seconds = parse_duration_s(raw)
    except ValueError as exc:
        raise PodSpecError(
            f'invalid {keys.GANG_TIMEOUT} value "{raw}": {exc}', field=keys.GANG_TIMEOUT, value=raw
        ) from None
    if 0 < seconds < 1:  # the contract counts whole seconds: rounding 100ms up to 1 s would wait 10 times longer
        raise PodSpecError(
            f'invalid {keys.GANG_TIMEOUT} value "{raw}": below gpuledger\'s resolution of 1s (give 0 for no '
            "timeout, or 1s or more)", field=keys.GANG_TIMEOUT, value=raw
        )
    return raw if seconds else ""


def _desired(min_members: int, desired: int | None) -> int:
    if min_members == 1:
        raise PodSpecError(
            f"invalid {keys.GANG_MIN_MEMBERS}=1: explicit gang minMembers must be >= 2",
            field=keys.GANG_MIN_MEMBERS,
            value="1",
        )
    if desired is None:
        if min_members >= 2:
            return min_members
        raise PodSpecError(
            f"invalid {keys.GANG_ENABLED}=true: cannot determine gang size — set "
            f"{keys.GANG_MIN_MEMBERS} or spec.replicas on the workload",
            field=keys.GANG_ENABLED,
            value="true",
        )
    desired = max(desired, 0)
    if desired < 2:
        raise PodSpecError(
            f"invalid {keys.GANG_ENABLED}=true: gang scheduling requires at least 2 replicas, got {desired}",
            field=keys.GANG_ENABLED,
            value="true",
        )
    if min_members >= 2 and min_members > desired:
        raise PodSpecError(
            f"invalid {keys.GANG_MIN_MEMBERS}={min_members}: exceeds desired replicas {desired}",
            field=keys.GANG_MIN_MEMBERS,
            value=str(min_members),
        )
    return desired


def gang_attributes(
    annotations: Mapping[str, str],
    *,
    profile_gang: Mapping[str, Any] | None,
    desired: int | None,
    group_key: str,
) -> dict[str, str]:
    """Gang annotations to stamp, or {} when gang scheduling is off.

    ``desired``: enabled-replicas, else the profile's replicas, else the owner's replicas (None:
    unknown). Raises PodSpecError with TensorFusion's message naming the key.
    """
    if annotations.get(keys.GANG_ENABLED) != "true" and profile_gang is None:
        return {}
    gang = profile_gang or {}
    min_members = _min_members(annotations, gang)
    timeout = _timeout(annotations, gang)
    size = _desired(min_members, desired)
    stamped = {
        keys.GANG_DESIRED: str(size),
        keys.GANG_REQUIRED: str(min_members if min_members >= 2 else size),
        keys.GANG_GROUP_KEY: group_key,
    }
    if timeout:
        stamped[keys.GANG_TIMEOUT] = timeout
    return stamped


def gang_spec(stamped: Mapping[str, str]) -> GangSpec | None:
    """The contract's gang from the stamped attributes (:func:`gang_attributes`), None without one.

    ``timeout_s`` is the ``gang-timeout`` duration in whole seconds, rounded up (``1500ms`` waits
    2 s; a timeout below 1 s is refused when the annotation is read, docs/compatibility.md); the
    bounds (:mod:`events.bounds`) are checked with the rest of the spec."""
    key = stamped.get(keys.GANG_GROUP_KEY)
    if key is None:
        return None
    timeout = parse_duration_s(stamped.get(keys.GANG_TIMEOUT, ""))
    return GangSpec(key=key, quorum=int(stamped[keys.GANG_REQUIRED]), desired=int(stamped[keys.GANG_DESIRED]),
                    timeout_s=math.ceil(timeout))
