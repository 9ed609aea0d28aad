"""The GPU model table: every spec model resolves, spellings from GFD/NVML meet, unknown models fall back."""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog
from hypothesis import given
from hypothesis import strategies as st

from services.discovery.catalog import CatalogError, ModelTable, normalize

TABLE = ModelTable.load()

# (spelling as a source reports it, model key, dense FP16 TFLOPS as in TensorFusion's gpu-info tables)
SPELLINGS = [
    ("NVIDIA-A100-SXM4-80GB", "A100_SXM_80G", "312"),        # GFD product label
    ("NVIDIA A100-SXM4-80GB", "A100_SXM_80G", "312"),        # NVML name
    ("a100_sxm_80g", "A100_SXM_80G", "312"),                 # case-insensitive model key
    ("NVIDIA A100_SXM_80G", "A100_SXM_80G", "312"),          # vendor prefix stripped
    ("NVIDIA A100 80GB PCIe", "A100_PCIe_80G", "312"),
    ("Tesla-T4-SHARED", "T4", "65"),                         # GFD time-slicing suffix
    ("Tesla T4", "T4", "65"),
    ("NVIDIA H100 80GB HBM3", "H100_SXM", "989"),
    ("NVIDIA-H100-PCIe", "H100_PCIe", "756"),                # ProviderConfig wins over chart 835
    ("NVIDIA H200", "H200", "989"),
    ("NVIDIA H200 NVL", "H200_NVL", "835"),
    ("NVIDIA-B200", "B200_SXM", "2250"),
    ("NVIDIA L4", "L4", "121"),
    ("NVIDIA L40", "L40", "362"),                            # ProviderConfig 362, chart 181
    ("NVIDIA L40S", "L40S", "366"),                          # ProviderConfig 366, chart 365
    ("NVIDIA A30", "A30", "165"),                            # ProviderConfig only
    ("NVIDIA A10", "A10", "125"),
    ("NVIDIA A40-PCIE-48GB", "A40", "149.7"),
    ("NVIDIA GeForce GTX 1070", "GTX1070", "0.101"),
    ("Tesla V100-SXM2-32GB", "V100M32", "125"),
    ("V100M16", "V100M16", "125"),
    ("P100", "P100", "18.7"),
    ("Tesla P100-PCIE-16GB", "P100", "18.7"),
    ("G2", "G2", "312"),
    ("G3", "G3", "989"),
    ("Apple M3 Max", "M3Max", "28.4"),
    ("AMD Radeon RX 7900 XTX", "RX7900XTX", "122.8"),
    ("Huawei Ascend 310P3", "Ascend_310P3", "22"),
    ("Alibaba PPU Zhenwu 810E", "PPU-ZW810E", "386"),
    ("Example-GPU-Model", "Example-GPU-Model", "312"),
]


@pytest.mark.parametrize(("spelling", "key", "tflops"), SPELLINGS)
def test_spellings_resolve_to_the_spec_capacity(spelling: str, key: str, tflops: str) -> None:
    model = TABLE.find(spelling)
    assert model is not None, spelling
    assert (model.name, model.milli_tflops) == (key, round(float(tflops) * 1000))


def test_table_covers_the_spec_tables_and_the_required_models() -> None:
    names = {m.name for m in TABLE.models}
    required = {"H100_SXM", "H200", "B200_SXM", "L4", "L40S", "A10", "T4", "V100", "P100", "A30",
                "V100M16", "V100M32", "G2", "G3"}
    assert required <= names
    vendors = {m.vendor for m in TABLE.models}
    assert {"NVIDIA", "AMD", "Apple", "Ascend", "PPU"} <= vendors
    assert len(TABLE.models) >= 112 + 3  # chart table 1 (112) + ProviderConfig/others + trace models


def test_openb_models_are_all_known() -> None:
    csv = Path(__file__).resolve().parents[3] / "data/openb/openb_node_list_gpu_node.csv"
    models = {line.split(",")[4].strip() for line in csv.read_text().splitlines()[1:] if line}
    assert models and all(TABLE.find(m) is not None for m in models), models


@given(st.sampled_from([(m, s) for m in TABLE.models for s in (m.name, m.full_name, *m.aliases)]),
       st.randoms(use_true_random=False))
def test_any_case_and_separator_variant_finds_the_same_model(pair: tuple, rnd) -> None:  # type: ignore[type-arg]
    model, spelling = pair
    variant = "".join(rnd.choice((c.upper(), c.lower())) if c.isalpha() else
                      (rnd.choice((" ", "_", "-")) if c in " _-" else c) for c in spelling)
    assert TABLE.find(variant) == model


def test_unknown_model_gets_default_capacity_and_a_warning() -> None:
    with structlog.testing.capture_logs() as logs:
        capacity = TABLE.capacity("NVIDIA Quantum QPU", vram_bytes=8 * 2**30, where="node-x",
                                  default_milli_tflops=42_000, default_vram_bytes=2**30)
    assert (capacity.known, capacity.model, capacity.milli_tflops, capacity.vram_bytes) == (
        False, "NVIDIA Quantum QPU", 42_000, 8 * 2**30)
    warning = [e for e in logs if e["log_level"] == "warning"]
    assert warning and warning[0]["model"] == "NVIDIA Quantum QPU" and warning[0]["node"] == "node-x"


def test_measured_vram_wins_over_the_table_and_the_table_over_the_default() -> None:
    measured = TABLE.capacity("NVIDIA L4", vram_bytes=23034 * 2**20, default_milli_tflops=1, default_vram_bytes=1)
    tabled = TABLE.capacity("NVIDIA L4", default_milli_tflops=1, default_vram_bytes=1)
    apple = TABLE.capacity("Apple M1", default_milli_tflops=1, default_vram_bytes=7)
    assert (measured.vram_bytes, tabled.vram_bytes, apple.vram_bytes) == (23034 * 2**20, 24 * 2**30, 7)
    assert measured.milli_tflops == tabled.milli_tflops == 121_000


def test_normalize_strips_vendor_prefix_and_gfd_suffix() -> None:
    assert normalize("  NVIDIA-A100-SXM4-80GB-SHARED ") == normalize("a100 sxm4 80gb") == "a100-sxm4-80gb"


@pytest.mark.parametrize(("body", "message"), [
    ("models: [{name: X}]", "fp16_tflops"),
    ("models: [{name: X, fp16_tflops: 1.2345}]", "at most 3 decimals"),
    ("models: [{name: X, fp16_tflops: 1, vram: lots}]", "vram"),
    ("models: [{name: X, fp16_tflops: 1}, {name: x, fp16_tflops: 2}]", "clashes"),
    ("nodes: []", "'models' list"),
])
def test_malformed_table_is_a_clear_error(tmp_path: Path, body: str, message: str) -> None:
    path = tmp_path / "models.yaml"
    path.write_text(body)
    with pytest.raises(CatalogError, match=message):
        ModelTable.load(path)
