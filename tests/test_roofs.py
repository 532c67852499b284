"""The roofs (issue 50): formula peaks from constructed CPU flag sets and GPU specs, the one
datasheet table with its sources, the flag above a roof, the speedup's bound, the cache
keyed on device and stack, and a real (tiny) measurement on this CPU against its formula."""

from __future__ import annotations

import json
import os

import pytest

from mxbench.roofs import cache, clock, collect, cpu, datasheet, gpu, host, preflight
from mxbench.roofs.model import ABOVE, Roof, amdahl_bound, judge

# ---- CPU formula --------------------------------------------------------------------------

AVX2 = {"sse2", "avx", "avx2", "fma"}
SKYLAKE_SP = AVX2 | {"avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_vnni"}
COOPER_LAKE = SKYLAKE_SP | {"avx512_bf16"}
SAPPHIRE_RAPIDS = COOPER_LAKE | {"avx512_fp16", "amx_tile", "amx_bf16", "amx_int8"}


def _values(roofs: list[Roof]) -> dict[str, float | None]:
    return {r.dtype: r.value for r in roofs}


def test_cpu_formula_avx2_has_no_bf16_path_and_says_what_emulation_reaches() -> None:
    roofs = cpu.formula_roofs("cpu", AVX2, cores=4, ghz=3.0, clock_source="given")
    v = _values(roofs)
    assert v["float32"] == pytest.approx(32 * 4 * 3.0 / 1000)  # 0.384 TFLOP/s
    assert v["bfloat16"] is None and v["float16"] is None and v["int8"] is None
    bf16 = next(r for r in roofs if r.dtype == "bfloat16")
    assert bf16.native is False and "no native bfloat16 path" in bf16.note
    assert "384 GFLOP/s" in bf16.note  # at best the float32 roof
    assert all(r.provenance == "formula" and r.source for r in roofs)


@pytest.mark.parametrize(
    ("flags", "vendor", "family", "model", "fp32", "bf16", "fp16", "int8"),
    [
        (SKYLAKE_SP, "GenuineIntel", 6, 85, 64, None, None, 256),
        (COOPER_LAKE, "GenuineIntel", 6, 85, 64, 128, None, 256),
        (SAPPHIRE_RAPIDS, "GenuineIntel", 6, 143, 64, 1024, 128, 2048),
        (COOPER_LAKE, "AuthenticAMD", 0x19, 0x11, 32, 64, None, 128),  # Zen 4: 2 x 256-bit
        (COOPER_LAKE, "AuthenticAMD", 0x1A, 0x02, 64, 128, None, 256),  # Zen 5: full 512
        (AVX2, "AuthenticAMD", 0x17, 0x01, 16, None, None, None),  # Zen 1: 2 x 128-bit
        (AVX2, "AuthenticAMD", 0x17, 0x31, 32, None, None, None),  # Zen 2
        ({"sse2", "avx"}, "GenuineIntel", 6, 42, 16, None, None, None),  # Sandy Bridge
    ],
)
def test_cpu_rates_per_cycle_from_flags(
    flags: set[str],
    vendor: str,
    family: int,
    model: int,
    fp32: int,
    bf16: int | None,
    fp16: int | None,
    int8: int | None,
) -> None:
    r = cpu.rates(flags, vendor, family, model)
    assert (r.float32, r.bfloat16, r.float16, r.int8) == (fp32, bf16, fp16, int8)


def test_onednn_isa_cap_makes_the_formula_the_capped_cpus() -> None:
    roofs = cpu.formula_roofs("cpu", SAPPHIRE_RAPIDS, 2, 2.0, "given", max_isa="AVX2")
    v = _values(roofs)
    assert v["float32"] == pytest.approx(32 * 2 * 2.0 / 1000) and v["bfloat16"] is None
    assert all("ONEDNN_MAX_CPU_ISA=AVX2" in r.source for r in roofs)
    bf16 = cpu.formula_roofs("cpu", SAPPHIRE_RAPIDS, 2, 2.0, "given", max_isa="AVX512_CORE_BF16")
    assert _values(bf16)["bfloat16"] == pytest.approx(128 * 2 * 2.0 / 1000)
    assert cpu.capped(SAPPHIRE_RAPIDS, None) == SAPPHIRE_RAPIDS


def test_cpuinfo_parse_counts_physical_cores_of_the_allowed_cpus() -> None:
    block = (
        "processor\t: {p}\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
        "model name\t: AMD EPYC 9654\ncpu MHz\t\t: 2400.000\nphysical id\t: 0\n"
        "core id\t\t: {c}\nflags\t\t: fpu avx2 fma avx512f avx512_bf16\n"
    )
    text = "\n".join(block.format(p=p, c=p // 2) for p in range(8))  # SMT: 2 threads a core
    f = host.parse(text, allowed={0, 1, 2, 3})
    assert f.cores == 2 and f.family == 0x19 and f.model_number == 0x11 and f.mhz == 2400.0
    assert {"avx512_bf16", "fma"} <= f.flags and f.model == "AMD EPYC 9654"
    assert host.parse(text).cores == 4


def test_the_clock_is_measured_where_the_loop_can_run() -> None:
    ghz = clock.measured_ghz(iterations=20_000, repeats=3)
    if ghz is None:
        pytest.skip("no x86-64 executable page here: the formula falls back to the stated clock")
    assert 0.5 < ghz < 7.0


# ---- GPU formula and datasheets -----------------------------------------------------------

# (name, compute capability, SMs, boost MHz, {dtype: datasheet TFLOP/s it must reproduce})
GPUS = [
    ("Tesla V100-SXM2-16GB", (7, 0), 80, 1530, {"float32": 15.7, "float16": 125.0}),
    ("NVIDIA TITAN Xp", (6, 1), 30, 1582, {"float32": 12.15, "float16": 0.19}),
    ("Quadro M2200", (5, 2), 8, 1036, {"float32": 2.12}),
    (
        "NVIDIA A100-SXM4-80GB",
        (8, 0),
        108,
        1410,
        {"float32": 19.5, "tf32": 156.0, "bfloat16": 312.0, "float16": 312.0, "int8": 624.0},
    ),
    (
        "NVIDIA H100 80GB HBM3",
        (9, 0),
        132,
        1830,
        {"tf32": 494.7, "bfloat16": 989.4, "float16": 989.4, "float8": 1978.9},
    ),
    (
        "NVIDIA L4",
        (8, 9),
        58,
        2040,
        {"float32": 30.3, "tf32": 60.0, "bfloat16": 121.0, "float8": 242.5},
    ),
    ("Tesla T4", (7, 5), 40, 1590, {"float32": 8.1, "float16": 65.0, "int8": 130.0}),
]


@pytest.mark.parametrize(("name", "cc", "sms", "mhz", "expect"), GPUS)
def test_gpu_formula_reproduces_the_datasheet(
    name: str, cc: tuple[int, int], sms: int, mhz: int, expect: dict[str, float]
) -> None:
    formula = _values(gpu.formula_roofs(name, cc, sms, mhz))
    sheet = datasheet.sheet(name)
    assert sheet is not None
    for dtype, value in expect.items():
        assert formula[dtype] == pytest.approx(value, rel=0.02), dtype
        assert sheet.peaks[dtype] == pytest.approx(value, rel=0.001), dtype


def test_gpu_formula_says_where_there_is_no_fast_path() -> None:
    m2200 = {r.dtype: r for r in gpu.formula_roofs("Quadro M2200", (5, 2), 8, 1036)}
    assert m2200["float16"].value is None and m2200["float16"].native is False
    assert "float32" in m2200["float16"].note
    v100 = {r.dtype: r for r in gpu.formula_roofs("V100", (7, 0), 80, 1530)}
    assert v100["bfloat16"].value is None and v100["float16"].native is True
    titan = {r.dtype: r for r in gpu.formula_roofs("TITAN Xp", (6, 1), 30, 1582)}
    assert titan["float16"].native is False  # 1/64 of float32's rate: no fast path
    unknown = gpu.formula_roofs("future", (13, 0), 100, 2000)
    assert all(r.value is None and "no per-SM rates" in r.note for r in unknown)
    assert gpu.tensor_cores((8, 0), "bfloat16") and not gpu.tensor_cores((7, 5), "bfloat16")


def test_datasheet_table_entries_carry_sources_and_dense_flags() -> None:
    for name in (
        "Tesla V100-SXM2-16GB",
        "NVIDIA TITAN Xp",
        "Quadro M2200",
        "A100-SXM4-40GB",
        "NVIDIA H100 80GB HBM3",
        "NVIDIA H200",
        "NVIDIA L4",
        "Tesla T4",
    ):
        roofs = datasheet.roofs(name)
        assert roofs, name
        for r in roofs:
            assert r.provenance == "datasheet" and "NVIDIA" in r.source, r
            assert r.value is None or r.value > 0
        assert any(r.kind == "bandwidth" and r.value for r in roofs), name
    h100 = datasheet.roofs("NVIDIA H100 80GB HBM3")
    dense = [r for r in h100 if r.dtype == "bfloat16" and r.dense]
    sparse = [r for r in h100 if r.dtype == "bfloat16" and r.dense is False]
    assert [r.value for r in dense] == [989.4] and [r.value for r in sparse] == [1978.8]
    assert datasheet.sheet("NVIDIA H100 PCIe").peaks["bfloat16"] == 756.0  # type: ignore[union-attr]
    assert datasheet.roofs("NVIDIA GeForce GTX 1660 Ti") == []
    titan16 = datasheet.roofs("NVIDIA TITAN Xp")
    assert any("1/64" in r.note for r in titan16 if r.dtype == "float16")


# ---- judging against a roof, and the bound ------------------------------------------------


def test_a_figure_above_its_roof_is_flagged() -> None:
    # the published Titan Xp mixed rows: about 45x the 1/64-rate float16 roof
    roof = next(r for r in datasheet.roofs("NVIDIA TITAN Xp") if r.dtype == "float16")
    j = judge(8.6, roof)
    assert j is not None and j.share > 40 and j.flag is not None and ABOVE in j.flag
    ok = judge(0.9 * 12.15, next(r for r in datasheet.roofs("TITAN Xp") if r.dtype == "float32"))
    assert ok is not None and ok.flag is None and ok.share == pytest.approx(0.9)
    none = Roof(device="d", dtype="bfloat16", value=None, provenance="formula", source="s")
    assert judge(1.0, none) is None


def test_amdahl_bound() -> None:
    assert amdahl_bound(0.0, 2.0) == 1.0
    assert amdahl_bound(1.0, 2.0) == pytest.approx(2.0)
    assert amdahl_bound(0.5, 2.0) == pytest.approx(4 / 3)
    assert amdahl_bound(0.8, 1e9) == pytest.approx(5.0)
    for f, r in ((-0.1, 2.0), (1.1, 2.0), (0.5, 0.0)):
        with pytest.raises(ValueError):
            amdahl_bound(f, r)


# ---- the cache ----------------------------------------------------------------------------


def test_cache_is_keyed_on_device_and_stack(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MXBENCH_ROOFS_CACHE", str(tmp_path))
    cpu_a = {"model": "AMD EPYC", "flags": ["avx2"], "cores": 2}
    base = cache.identity("torch", cpu_a, env={}, gpus=[])
    assert cache.load(base) is None
    where = cache.save(base, {"backend": "torch", "matmul": {}})
    assert where.parent == tmp_path and cache.load(base) == {"backend": "torch", "matmul": {}}
    others = [
        cache.identity("jax", cpu_a, env={}, gpus=[]),
        cache.identity("torch", {**cpu_a, "cores": 4}, env={}, gpus=[]),
        cache.identity("torch", cpu_a, env={"ONEDNN_MAX_CPU_ISA": "AVX2"}, gpus=[]),
        cache.identity("torch", cpu_a, env={}, gpus=["NVIDIA H200 GPU-1"]),
        {**base, "version": "0.0.0"},
    ]
    for other in others:
        assert cache.key(other) != cache.key(base) and cache.load(other) is None
    where.write_text(json.dumps({"identity": {"another": 1}, "measured": {}}))
    assert cache.load(base) is None  # a file of another identity is never taken


# ---- real measurements on this CPU --------------------------------------------------------


@pytest.mark.skipif(not collect.available(), reason="no backend installed")
@pytest.mark.process  # the probe measures in a fresh process
def test_measured_ceiling_on_this_cpu_is_under_its_formula(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MXBENCH_ROOFS_CACHE", str(tmp_path))
    backend = "torch" if "torch" in collect.available() else collect.available()[0]
    found = collect.collect([backend], quick=True)
    assert not found.errors, found.errors
    measured = [r for r in found.roofs if r.provenance == "measured"]
    assert {r.dtype for r in measured if r.kind == "matmul"} >= {"float32", "bfloat16"}
    for r in measured:
        assert r.backend == backend and r.source and r.value is not None and r.value > 0, r
        formula = found.find(r.device, r.dtype, "formula", kind=r.kind)
        if formula is not None and formula.value:
            assert r.value <= formula.value * 1.05, (r, formula)
    assert any(r.kind == "bandwidth" for r in measured)
    assert os.listdir(str(tmp_path))  # kept for this device and stack
    again = collect.collect([backend], quick=True)
    assert backend in again.cached
    assert [r for r in again.roofs if r.provenance == "measured"] == measured
    text = collect.text(again)
    assert "formula" in text and "from the cache" in text


# ---- pre-flight ---------------------------------------------------------------------------


def _constructed(kernels: dict[str, list[str]], bf16: float, fp16: float) -> collect.Roofs:
    device = "cpu: constructed"
    roofs = cpu.formula_roofs(device, COOPER_LAKE, 2, 3.0, "given", "GenuineIntel", 6, 85)
    for dtype, value in (("float32", 0.3), ("bfloat16", bf16), ("float16", fp16)):
        roofs.append(
            Roof(
                device=device,
                dtype=dtype,
                value=value,
                provenance="measured",
                source="constructed",
                backend="torch",
            )
        )
    return collect.Roofs(roofs=roofs, kernels={"torch": kernels})


def test_preflight_says_where_a_fast_path_exists_and_warns_where_none() -> None:
    found = _constructed(
        {"bfloat16": ["avx512_core_bf16"], "float16": ["avx512_core"]}, bf16=0.6, fp16=0.01
    )
    paths = {p.dtype: p for p in preflight.fast_paths(found)}
    assert paths["bfloat16"].state == "ok" and paths["bfloat16"].ratio == pytest.approx(2.0)
    assert "native" in paths["bfloat16"].hardware and "(native)" in paths["bfloat16"].kernels
    assert paths["float16"].state == "warn" and "no native float16" in paths["float16"].detail
    assert "little or nothing to gain" in paths["float16"].detail
    assert "float16" in preflight.text(list(paths.values()))


def test_preflight_warns_when_the_backend_does_not_use_the_hardwares_path() -> None:
    found = _constructed({"bfloat16": ["avx512_core"]}, bf16=0.28, fp16=0.28)
    bf16 = next(p for p in preflight.fast_paths(found) if p.dtype == "bfloat16")
    assert bf16.state == "warn" and "converted bfloat16 instead" in bf16.detail
    assert "though the hardware has a fast path" in bf16.detail


def test_kernels_from_a_onednn_log() -> None:
    log = [
        "onednn_verbose,v1,info,cpu,isa:Intel AVX-512 with AVX512BW, AVX512VL, and AVX512DQ",
        "onednn_verbose,v1,primitive,create:cache_miss,cpu,matmul,brg_matmul:avx512_core_bf16,"
        "undef,src:bf16::blocked:ab::f0 wei:bf16::blocked:ab::f0 dst:bf16::blocked:ab::f0,,,"
        "256x256:256x256,0.1",
        '{"backend": "torch"}',
    ]
    assert collect.kernels(log) == {"bfloat16": ["avx512_core_bf16"]}
    assert collect.kernels(['{"backend": "jax"}']) == {}


def test_roofs_command_prints_json(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from mxbench.cli import app

    monkeypatch.setenv("MXBENCH_ROOFS_CACHE", str(tmp_path))
    bad = CliRunner().invoke(app, ["roofs", "--backend", "numpy"])
    assert bad.exit_code == 2 and "unknown backend" in bad.output
    if "torch" not in collect.available():
        pytest.skip("torch not installed")
    done = CliRunner().invoke(app, ["roofs", "-b", "torch", "--quick", "--json"])
    assert done.exit_code == 0, done.output
    doc = json.loads(done.stdout)
    kinds = {(r["provenance"], r.get("backend")) for r in doc["roofs"]}
    assert {("formula", None), ("measured", "torch")} <= kinds and doc["seconds"] < 60


@pytest.mark.skipif("torch" not in collect.available(), reason="torch not installed")
@pytest.mark.process  # the probe measures in a fresh process
def test_on_an_avx2_only_cpu_bf16_has_no_roof_and_emulation_is_stated(
    tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cpu_kinds import KINDS

    monkeypatch.setenv("MXBENCH_ROOFS_CACHE", str(tmp_path))
    for k, v in KINDS["avx2"].items():
        monkeypatch.setenv(k, v)
    found = collect.collect(["torch"], quick=True)
    device = next(r.device for r in found.roofs if r.provenance == "measured")
    bf16 = found.find(device, "bfloat16", "formula")
    assert bf16 is not None and bf16.value is None and "no native bfloat16 path" in bf16.note
    row = next(r for r in collect.rows(found) if r["dtype"] == "bfloat16")
    assert "emulated:" in row["note"] and row["native"] == "no"
    paths = {p.dtype: p for p in preflight.fast_paths(found)}
    assert paths["bfloat16"].state == "warn" and "avx512_core_bf16" not in paths["bfloat16"].kernels
