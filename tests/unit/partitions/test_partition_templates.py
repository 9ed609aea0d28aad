"""The shipped MIG template table: consistent, cross-checked with a real H100's NVML, and the loader's errors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.values import Resources
from services.discovery.catalog import ModelTable
from services.partitions import templates
from services.partitions.templates import MigFamily, MigProfile, TemplateError, TemplateTable

TABLE = TemplateTable.load()
MODELS = ModelTable.load()
CAPTURE = json.loads((Path(__file__).parents[2] / "fixtures" / "nvml_h100_80gb_hbm3.json").read_text())


def test_every_mig_model_of_nvidia_is_covered_and_known_to_discovery() -> None:
    for model in ("A30", "A100_SXM_40G", "A100_SXM_80G", "A100_PCIe_80G", "H100_SXM", "H100_PCIe",
                  "H100_NVL", "H200", "B200_SXM"):
        assert TABLE.supports_mig(model), model
    assert not TABLE.supports_mig("L4") and TABLE.family_of("T4") is None
    for family in TABLE.families:
        for model in family.models:
            row = MODELS.find(model)
            assert row is not None and row.name == model, model
            assert row.vram_bytes >= family.memory_gb * templates.GB, model  # the whole-GPU profile fits


@pytest.mark.parametrize("family", TABLE.families, ids=lambda f: f.family)
def test_family_geometry(family: MigFamily) -> None:
    full = family.profile(f"{family.compute_slices}g.{family.memory_gb}gb")
    assert full is not None and full.placements() == ((0, family.memory_slices),)
    for profile in family.profiles:
        assert all(0 <= s < e <= family.memory_slices for s, e in profile.placements())
        assert profile.memory_slices >= profile.compute_slices
        assert profile.memory_bytes <= family.memory_gb * templates.GB
        assert profile.max_instances * profile.compute_slices <= family.compute_slices
        assert profile.max_instances <= templates.most_disjoint(profile.placements())
    # memory per slice is the family's memory split evenly, up to NVIDIA's rounding of names
    for profile in family.profiles:
        share = family.memory_gb * profile.memory_slices / family.memory_slices
        assert abs(profile.memory_gb - share) <= 1, profile.name


def test_h100_rows_equal_what_nvml_reported_on_a_real_h100() -> None:
    family = TABLE.family_of("H100_SXM")
    assert family is not None
    measured = CAPTURE["mig_gpu_instance_profiles"]
    assert sorted(p["name"].removeprefix("MIG ") for p in measured) == sorted(p.name for p in family.profiles)
    for row in measured:
        profile = family.profile(row["name"])
        assert profile is not None
        assert (profile.nvml_profile_id, profile.compute_slices, profile.max_instances) == (
            row["profile_id"], row["slice_count"], row["max_instances"])
        assert profile.placements() == tuple((s, s + n) for s, n in row["placements_start_size"])
        # bytes = GB x 10^9 never exceeds what the instance really has, and is within 10 % of it
        assert 0.9 * row["memory_mib"] * 2**20 <= profile.memory_bytes <= row["memory_mib"] * 2**20
    assert family.memory_gb * templates.GB <= CAPTURE["device"]["memory_total_bytes"]


def test_placement_decides_what_fits_not_the_counts() -> None:
    family = TABLE.family_of("H100_SXM")
    assert family is not None
    three, two, one = (family.profile(n) for n in ("3g.40gb", "2g.20gb", "1g.10gb"))
    assert three and two and one
    # 3g at 4, 2g at 0: both 1g's still fit at 2 and 3
    assert templates.free_starts(one, [(4, 8), (0, 2)]) == (2, 3)
    # 3g at 0, 2g at 4, one 1g at 6: no start left for a second 1g
    assert templates.free_starts(one, [(0, 4), (4, 6), (6, 7)]) == ()
    assert templates.free_starts(two, [(0, 4)]) == (4,)
    assert templates.free_starts(three, []) == (0, 4)


@given(st.lists(st.integers(0, 7), max_size=8))
def test_free_starts_never_overlap_what_is_taken(singles: list[int]) -> None:
    family = TABLE.family_of("A100_SXM_80G")
    assert family is not None
    taken = [(s, s + 1) for s in singles]
    for profile in family.profiles:
        for start in templates.free_starts(profile, taken):
            assert start in profile.starts
            assert not any(start < hi and lo < start + profile.memory_slices for lo, hi in taken)


def test_profile_lookup_accepts_nvidias_prefix() -> None:
    family = TABLE.family_of("A30")
    assert family is not None and family.profile("MIG 2g.12gb") == family.profile("2g.12gb") is not None
    assert family.profile("3g.18gb") is None


def _family(**changes: Any) -> MigFamily:
    """A consistent two-slot toy family; ``profile=`` changes fields of its first profile."""
    profile = MigProfile(name="1g.5gb", nvml_profile_id=19, compute_slices=1, memory_slices=1, memory_gb=5,
                         max_instances=2, starts=(0, 1))
    whole = MigProfile(name="2g.10gb", nvml_profile_id=0, compute_slices=2, memory_slices=2, memory_gb=10,
                       max_instances=1, starts=(0,))
    profile = msgspec.structs.replace(profile, **changes.pop("profile", {}))
    family = MigFamily(family="toy", models=("Toy",), compute_slices=2, memory_slices=2, memory_gb=10,
                       profiles=(profile, whole))
    return msgspec.structs.replace(family, **changes)


@pytest.mark.parametrize(("change", "needle"), [
    ({}, ""),
    ({"profile": {"starts": (0, 2)}}, "placement [2, 3) outside 0..2"),
    ({"profile": {"max_instances": 3}}, "max_instances 3 not in 1..2"),
    ({"profile": {"memory_gb": 6}}, "name must be"),
    ({"profile": {"name": "1g.11gb", "memory_gb": 11}}, "memory_gb 11 not in 1..10"),
    ({"profile": {"memory_slices": 3}}, "memory_slices 3 not in 1..2"),
    ({"profile": {"starts": (0, 0)}}, "distinct"),
    ({"memory_gb": 12}, "no profile spans the whole GPU"),
    ({"profile": {"nvml_profile_id": 65}}, "nvml_profile_id 65 not in 0..64"),
    ({"profile": {"nvml_profile_id": -1}}, "nvml_profile_id -1 not in 0..64"),
])
def test_inconsistent_families_are_refused_naming_the_field(change: dict[str, Any], needle: str) -> None:
    if not needle:
        TemplateTable([_family()])
        return
    with pytest.raises(TemplateError, match=re.escape(needle)):
        TemplateTable([_family(**change)])


def test_a_model_in_two_families_is_refused() -> None:
    with pytest.raises(TemplateError, match="model Toy is in families toy and toy"):
        TemplateTable([_family(), _family()])


def test_loader_errors_name_the_file_and_the_entry(tmp_path: Path) -> None:
    bad = tmp_path / "mig.yaml"
    bad.write_text("families:\n  - family: x\n    models: [X]\n    compute_slices: seven\n")
    with pytest.raises(TemplateError, match=r"mig\.yaml.*compute_slices"):
        TemplateTable.load(bad)
    bad.write_text("families: [")
    with pytest.raises(TemplateError, match="not YAML"):
        TemplateTable.load(bad)
    bad.write_text("families:\n  - {family: x, models: [X], compute_slices: 1, memory_slices: 1, memory_gb: 1,"
                   " profiles: [], colour: red}\n")
    with pytest.raises(TemplateError, match="colour"):
        TemplateTable.load(bad)


@given(st.data())
def test_charges_of_any_valid_packing_never_exceed_the_gpu(data: st.DataObject) -> None:
    family = data.draw(st.sampled_from(TABLE.families))
    row = MODELS.find(data.draw(st.sampled_from(family.models)))
    assert row is not None
    capacity = Resources(milli_tflops=row.milli_tflops, vram_bytes=row.vram_bytes)
    taken: list[tuple[int, int]] = []
    total = Resources()
    for _ in range(family.memory_slices):
        profile = data.draw(st.sampled_from(family.profiles))
        starts = templates.free_starts(profile, taken)
        if not starts:
            continue
        start = data.draw(st.sampled_from(starts))
        taken.append((start, start + profile.memory_slices))
        used = templates.charge(family, profile, capacity)
        total = Resources(milli_tflops=total.milli_tflops + used.milli_tflops,
                          vram_bytes=total.vram_bytes + used.vram_bytes)
    assert total.milli_tflops <= capacity.milli_tflops and total.vram_bytes <= capacity.vram_bytes


def test_a_table_row_above_the_contracts_profile_id_is_refused_when_loaded(tmp_path: Path) -> None:
    shipped = msgspec.yaml.decode(templates.PROFILES_FILE.read_bytes())
    shipped["families"][0]["profiles"][0]["nvml_profile_id"] = 65
    bad = tmp_path / "mig.yaml"
    bad.write_bytes(msgspec.yaml.encode(shipped))
    with pytest.raises(TemplateError, match=r"nvml_profile_id 65 not in 0\.\.64"):
        TemplateTable.load(bad)


def test_a_charge_is_the_templates_size_on_a_real_h100() -> None:
    family = TABLE.family_of("H100_SXM")
    assert family is not None
    capacity = Resources(milli_tflops=989_000, vram_bytes=CAPTURE["device"]["memory_total_bytes"])
    three = family.profile("3g.40gb")
    assert three is not None
    assert templates.charge(family, three, capacity) == Resources(milli_tflops=423_850, vram_bytes=40 * 10**9)


def test_a_charge_has_tensorfusions_two_decimals() -> None:
    """TensorFusion charges a 1-of-7 slice of a 312-TFLOPS A100 as 44.57 TFLOPS (``%.2f``), not 44.571."""
    family = TABLE.family_of("A100_SXM_40G")
    assert family is not None and family.compute_slices == 7
    capacity = Resources(milli_tflops=312_000, vram_bytes=40 * 2**30)
    one, four = family.profile("1g.5gb"), family.profile("4g.20gb")
    assert one is not None and four is not None
    assert templates.charge(family, one, capacity).milli_tflops == 44_570
    assert templates.charge(family, four, capacity).milli_tflops == 178_280  # TensorFusion: 178.29, see compatibility

