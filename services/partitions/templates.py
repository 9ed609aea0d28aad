"""The MIG template table: load services/partitions/mig_profiles.yaml, check it, look profiles up by model.

Owns the table's shape (:class:`MigProfile` in :class:`MigFamily`), its consistency rules
(:func:`check_family`) and the slot arithmetic a partitioned allocation needs (:func:`free_starts`).
Pure: the only I/O is reading the table file when :meth:`TemplateTable.load` is called.

Slots are memory slices: a profile instance occupies ``[start, start + memory_slices)`` of the
GPU's ``memory_slices`` slots and may start only at its listed ``starts`` (NVIDIA Multi-Instance
GPU User Guide, "Supported MIG Profiles" and its placement diagrams). Memory is in bytes
(``memory_gb`` x 10^9, the decimal gigabytes of NVIDIA's profile names); compute in slices of
the GPU's ``compute_slices`` (a share of its TFLOPS is ``milli_tflops * slices // compute_slices``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from pathlib import Path

import msgspec

from events.bounds import MAX_PARTITION_SLOTS
from events.values import Resources

PROFILES_FILE = Path(__file__).with_name("mig_profiles.yaml")
"""The shipped table."""

GB = 10**9
"""Bytes per decimal gigabyte: NVIDIA's profile names ("1g.10gb") count memory in GB."""

_NAME = re.compile(r"^(?P<compute>\d+)g\.(?P<memory>\d+)gb(?P<me>\+me)?$")


CHARGE_STEP_MILLI_TFLOPS = 10
"""A partition's TFLOPS charge is a multiple of 0.01 TFLOPS (TensorFusion formats it with ``%.2f``)."""


class TemplateError(ValueError):
    """The table is malformed or inconsistent; the message names the family, profile and field."""


class MigProfile(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One MIG GPU instance profile of a GPU family.

    ``name`` ("3g.40gb"), ``nvml_profile_id`` (NVML's GPU instance profile id), ``compute_slices``
    and ``memory_slices`` (the placement width), ``memory_gb`` (decimal GB), ``max_instances`` per
    GPU, ``starts`` the allowed start slots.
    """

    name: str
    nvml_profile_id: int
    compute_slices: int
    memory_slices: int
    memory_gb: int
    max_instances: int
    starts: tuple[int, ...]

    @property
    def memory_bytes(self) -> int:
        """The instance's memory in bytes: ``memory_gb`` x 10^9."""
        return self.memory_gb * GB

    def placements(self) -> tuple[tuple[int, int], ...]:
        """Every allowed placement as a half-open slot range ``(start, end)``."""
        return tuple((start, start + self.memory_slices) for start in self.starts)


class MigFamily(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """GPUs sharing one profile table: ``models`` (model keys of the discovery model table),
    ``compute_slices`` and ``memory_slices`` (= placement slots) of the whole GPU, ``memory_gb``."""

    family: str
    models: tuple[str, ...]
    compute_slices: int
    memory_slices: int
    memory_gb: int
    profiles: tuple[MigProfile, ...]

    def profile(self, name: str) -> MigProfile | None:
        """The profile called ``name``, or None. Spellings are compared the way TensorFusion's
        internal/config/template_identifier.go ``MatchTemplateIdentifier`` does: case, ``.``, ``_``,
        spaces and ``/`` do not matter, and a ``mig-`` / "MIG " prefix is optional ("MIG 3g.40gb",
        "mig-3g-40gb" and "3G.40GB" all name 3g.40gb)."""
        wanted = canonical(name)
        return next((p for p in self.profiles if canonical(p.name) == wanted), None) if wanted else None


def canonical(name: str) -> str:
    """A template name reduced for comparison: lower case, separators as ``-``, no ``mig-`` prefix."""
    value = re.sub(r"[._ /]+", "-", name.strip().lower())
    value = re.sub(r"-+", "-", value).strip("-")
    return value.removeprefix("mig-")


class _File(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    families: tuple[MigFamily, ...]


def most_disjoint(placements: Iterable[tuple[int, int]]) -> int:
    """The largest number of pairwise disjoint half-open ranges among ``placements`` (earliest end first)."""
    count, end = 0, -1
    for start, stop in sorted(placements, key=lambda p: p[1]):
        if start >= end:
            count, end = count + 1, stop
    return count


def check_family(family: MigFamily) -> None:
    """Raise :class:`TemplateError` unless the family is consistent.

    Rules: slices positive; every placement inside ``0..memory_slices``; a profile's width is at
    least its compute slices; its name states its compute slices and GB; its memory is at most the
    GPU's; ``max_instances`` is at least 1, at most the disjoint placements and at most the compute
    slices allow; names are unique; the largest profile fills the GPU.
    """
    where = f"family {family.family}"
    if family.compute_slices < 1 or family.memory_slices < family.compute_slices or not family.models:
        raise TemplateError(f"{where}: needs models, compute_slices >= 1 and memory_slices >= compute_slices")
    for profile in family.profiles:
        _check_profile(family, profile, f"{where} profile {profile.name}")
    names = [p.name for p in family.profiles]
    if len(set(names)) != len(names):
        raise TemplateError(f"{where}: duplicate profile names {sorted(names)}")
    if not any(p.memory_slices == family.memory_slices and p.memory_gb == family.memory_gb
               for p in family.profiles):
        raise TemplateError(f"{where}: no profile spans the whole GPU ({family.memory_gb}gb)")


def _check_profile(family: MigFamily, profile: MigProfile, where: str) -> None:
    if not 0 <= profile.nvml_profile_id <= MAX_PARTITION_SLOTS:  # the contract's Partition.profile_id (a Slot)
        raise TemplateError(f"{where}: nvml_profile_id {profile.nvml_profile_id} not in 0..{MAX_PARTITION_SLOTS} "
                            "(the bound of Partition.profile_id in the event contract)")
    match = _NAME.match(profile.name)
    if match is None or int(match["compute"]) != profile.compute_slices or int(match["memory"]) != profile.memory_gb:
        raise TemplateError(f"{where}: name must be <compute_slices>g.<memory_gb>gb[+me] "
                            f"({profile.compute_slices}g.{profile.memory_gb}gb)")
    if not 1 <= profile.compute_slices <= family.compute_slices:
        raise TemplateError(f"{where}: compute_slices {profile.compute_slices} not in 1..{family.compute_slices}")
    if not profile.compute_slices <= profile.memory_slices <= family.memory_slices:
        raise TemplateError(f"{where}: memory_slices {profile.memory_slices} not in "
                            f"{profile.compute_slices}..{family.memory_slices}")
    if not 0 < profile.memory_gb <= family.memory_gb:
        raise TemplateError(f"{where}: memory_gb {profile.memory_gb} not in 1..{family.memory_gb}")
    if not profile.starts or len(set(profile.starts)) != len(profile.starts):
        raise TemplateError(f"{where}: starts {list(profile.starts)} must be distinct and not empty")
    for start, end in profile.placements():
        if start < 0 or end > family.memory_slices:
            raise TemplateError(f"{where}: placement [{start}, {end}) outside 0..{family.memory_slices}")
    most = min(most_disjoint(profile.placements()), family.compute_slices // profile.compute_slices)
    if not 1 <= profile.max_instances <= most:
        raise TemplateError(f"{where}: max_instances {profile.max_instances} not in 1..{most} "
                            "(disjoint placements and compute slices)")


class TemplateTable:
    """The checked families, looked up by model key (``GpuSpec.model``)."""

    def __init__(self, families: Iterable[MigFamily]) -> None:
        self.families = tuple(families)
        self._by_model: dict[str, MigFamily] = {}
        for family in self.families:
            check_family(family)
            for model in family.models:
                other = self._by_model.setdefault(model, family)
                if other is not family:
                    raise TemplateError(f"model {model} is in families {other.family} and {family.family}")

    @classmethod
    def load(cls, path: str | Path = PROFILES_FILE) -> TemplateTable:
        """Read and check a table file (``{"families": [...]}``); raises :class:`TemplateError`
        naming the offending entry, or OSError."""
        try:
            data = msgspec.yaml.decode(Path(path).read_bytes(), type=_File)
        except msgspec.ValidationError as exc:
            raise TemplateError(f"{path}: {exc}") from None
        except msgspec.DecodeError as exc:
            raise TemplateError(f"{path}: not YAML: {exc}") from None
        try:
            return cls(data.families)
        except TemplateError as exc:
            raise TemplateError(f"{path}: {exc}") from None

    def family_of(self, model: str) -> MigFamily | None:
        """The family of a model key, or None when the model has no MIG (not in the table)."""
        return self._by_model.get(model)

    def supports_mig(self, model: str) -> bool:
        """True when the model has a MIG profile table."""
        return model in self._by_model


@functools.cache
def shipped() -> TemplateTable:
    """The shipped table (:data:`PROFILES_FILE`), read and checked once per process; raises
    :class:`TemplateError` when the packaged file is broken."""
    return TemplateTable.load()


def free_starts(profile: MigProfile, taken: Iterable[tuple[int, int]]) -> tuple[int, ...]:
    """The start slots at which ``profile`` fits next to the ``taken`` half-open slot ranges.

    A start fits when its whole range ``[start, start + memory_slices)`` overlaps none of ``taken``.
    (The per-profile ``max_instances`` is the caller's to count.)
    """
    busy = tuple(taken)
    return tuple(start for start, end in profile.placements()
                 if all(end <= lo or start >= hi for lo, hi in busy))


def charge(family: MigFamily, profile: MigProfile, capacity: Resources) -> Resources:
    """What one ``profile`` instance takes of a GPU of ``family`` with ``capacity``.

    milli-TFLOPS: ``capacity.milli_tflops * profile.compute_slices / family.compute_slices`` rounded
    down to 0.01 TFLOPS (10 milli-TFLOPS), TensorFusion's precision (its CalculatePartitionResourceUsage
    formats the template's TFLOPS with ``%.2f``: 312 TFLOPS / 7 is charged 44.57 by both); down
    rather than to nearest, so the instances of any valid placement never sum above the capacity
    (docs/compatibility.md);
    bytes: the profile's memory (GB x 10^9), at most the GPU's VRAM. TensorFusion charges a
    partition at its template's size, not at the request (internal/gpuallocator/partition_strategy.go).
    """
    exact = capacity.milli_tflops * profile.compute_slices // family.compute_slices
    return Resources(milli_tflops=exact - exact % CHARGE_STEP_MILLI_TFLOPS,
                     vram_bytes=min(profile.memory_bytes, capacity.vram_bytes))
