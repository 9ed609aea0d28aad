"""The GPU model table: load services/discovery/models.yaml and turn a reported model name into capacity.

Owns name normalisation (GFD product labels, NVML names and TensorFusion model keys all meet
in one key), the lookup, and the unknown-model fallback (a warning naming the model, then a
configurable default TFLOPS; never an exception). VRAM reported by a source always wins over
the table's. Units: milli-TFLOPS and bytes.
"""

from __future__ import annotations

import difflib
import re
from decimal import Decimal
from pathlib import Path

import msgspec
import structlog
import yaml

from events import quantity

log = structlog.get_logger(__name__)

MODELS_FILE = Path(__file__).with_name("models.yaml")
"""The shipped model table."""

_PREFIXES = ("nvidia-", "tesla-")
_SUFFIXES = ("-shared",)


class CatalogError(ValueError):
    """The model table file is malformed; the message names the entry and field."""


class GpuModel(msgspec.Struct, frozen=True, kw_only=True):
    """One row of the table: ``milli_tflops`` dense FP16 (milli-TFLOPS), ``vram_bytes`` (0: unknown)."""

    name: str
    full_name: str
    vendor: str
    milli_tflops: int
    vram_bytes: int = 0
    aliases: tuple[str, ...] = ()


class Capacity(msgspec.Struct, frozen=True, kw_only=True):
    """What a GPU is registered with: model key, vendor, milli-TFLOPS, VRAM bytes, and whether it was known."""

    model: str
    vendor: str
    milli_tflops: int
    vram_bytes: int
    known: bool


def normalize(name: str) -> str:
    """Lookup key: ``"NVIDIA-A100-SXM4-80GB"``, ``"NVIDIA A100-SXM4-80GB"`` -> ``"a100-sxm4-80gb"``.

    Lowercase; runs of spaces, underscores and dashes become one dash; a leading "nvidia-" or
    "tesla-" (vendor prefix, as TensorFusion strips it in matchFp16TFlops) and a trailing GFD
    "-shared" (time-slicing) are dropped.
    """
    key = re.sub(r"[\s_\-]+", "-", name.strip().lower()).strip("-")
    for prefix in _PREFIXES:
        if key.startswith(prefix) and len(key) > len(prefix):
            key = key[len(prefix):]
    for suffix in _SUFFIXES:
        key = key.removesuffix(suffix)
    return key


def _row(entry: object, *, position: int) -> GpuModel:
    if not isinstance(entry, dict) or "name" not in entry or "fp16_tflops" not in entry:
        raise CatalogError(f"models[{position}]: needs at least 'name' and 'fp16_tflops', got {entry!r}")
    name = str(entry["name"])
    try:
        milli = Decimal(str(entry["fp16_tflops"])) * 1000
        vram = quantity.to_value(str(entry["vram"])) if entry.get("vram") else 0
    except (ArithmeticError, ValueError) as exc:
        raise CatalogError(f"models[{position}] ({name}): bad fp16_tflops/vram: {exc}") from exc
    if milli < 0 or milli != milli.to_integral_value():
        raise CatalogError(f"models[{position}] ({name}): fp16_tflops {entry['fp16_tflops']!r} "
                           "must be >= 0 with at most 3 decimals")
    return GpuModel(name=name, full_name=str(entry.get("full_name", name)),
                    vendor=str(entry.get("vendor", "NVIDIA")), milli_tflops=int(milli), vram_bytes=vram,
                    aliases=tuple(str(a) for a in entry.get("aliases") or ()))


class ModelTable:
    """Lookup over :class:`GpuModel` rows by any normalised spelling (name, full name, aliases)."""

    def __init__(self, models: list[GpuModel]) -> None:
        self.models = tuple(models)
        self._by_key: dict[str, GpuModel] = {}
        for model in models:
            for spelling in (model.name, model.full_name, *model.aliases):
                key = normalize(spelling)
                other = self._by_key.setdefault(key, model)
                if other.milli_tflops != model.milli_tflops or other.vram_bytes != model.vram_bytes:
                    raise CatalogError(f"spelling {spelling!r} of {model.name} clashes with {other.name}")

    @classmethod
    def load(cls, path: str | Path = MODELS_FILE) -> ModelTable:
        """Read a models.yaml (``{"models": [...]}``); raises CatalogError naming a bad entry."""
        data = yaml.safe_load(Path(path).read_text())
        if not isinstance(data, dict) or not isinstance(data.get("models"), list):
            raise CatalogError(f"{path}: expected a mapping with a 'models' list")
        return cls([_row(entry, position=i) for i, entry in enumerate(data["models"])])

    def find(self, name: str) -> GpuModel | None:
        """The row for any spelling of ``name``, or None."""
        return self._by_key.get(normalize(name)) if name.strip() else None

    def closest(self, name: str, *, most: int = 3) -> list[str]:
        """Up to ``most`` model names spelled most like ``name`` (difflib over every normalised
        spelling), best first; for a refusal that names an unknown model."""
        keys = difflib.get_close_matches(normalize(name), list(self._by_key), n=4 * most, cutoff=0.5)
        found: list[str] = []
        for key in keys:
            model = self._by_key[key].name
            if model not in found:
                found.append(model)
        return found[:most]

    def capacity(self, name: str, *, vram_bytes: int = 0, default_milli_tflops: int,
                 default_vram_bytes: int, where: str = "") -> Capacity:
        """Capacity of a GPU reported as ``name`` with ``vram_bytes`` measured memory (0: not measured).

        Known model: its milli-TFLOPS; VRAM = measured, else the table's, else the default.
        Unknown model: logs a warning naming ``name`` and ``where`` (node), uses the defaults;
        the model key stays the reported name so the allocator's model filter still works.
        """
        model = self.find(name)
        if model is None:
            log.warning("unknown GPU model: using the default capacity; add it to the model table "
                        "(GPULEDGER_DISCOVERY_MODELS_FILE)", model=name, node=where or "?",
                        default_tflops=quantity.format_milli(default_milli_tflops))
            return Capacity(model=name.strip() or "unknown", vendor="NVIDIA", known=False,
                            milli_tflops=default_milli_tflops, vram_bytes=vram_bytes or default_vram_bytes)
        return Capacity(model=model.name, vendor=model.vendor, known=True, milli_tflops=model.milli_tflops,
                        vram_bytes=vram_bytes or model.vram_bytes or default_vram_bytes)
