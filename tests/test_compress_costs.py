"""Compression cost models: the fit, the GPU roofline tables, `gcbench bench compressors`."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.compress.costs import ESPRESSO_V100_US, ROOFLINE, CostModel, Segment, fit, gpu_table


def test_fit_recovers_a_line_and_a_bend():
    line = [(b, 20e-6 + b * 1e-10) for b in (2**k for k in range(12, 28, 2))]
    m = fit(line)
    assert len(m.segments) == 1
    assert m.segments[0].fixed_s == pytest.approx(20e-6, rel=1e-6)
    assert m.segments[0].per_byte_s == pytest.approx(1e-10, rel=1e-6)
    # Cheap while it fits in cache, 4x the per-byte cost beyond 2^20 bytes.
    bend = [
        (b, 5e-6 + b * (1e-10 if b <= 2**20 else 4e-10)) for b in (2**k for k in range(12, 28, 2))
    ]
    m = fit(bend)
    assert len(m.segments) == 2
    assert all(m.seconds(b) == pytest.approx(t, rel=0.05) for b, t in bend)


def test_cost_model_is_piecewise():
    m = CostModel((Segment(100, 1.0, 0.0), Segment(math.inf, 0.0, 0.1)))
    assert m.seconds(50) == 1.0 and m.seconds(1000) == 100.0


def test_gpu_tables_match_espresso_v100_and_scale_with_bandwidth():
    v100, h100 = gpu_table("v100"), gpu_table("h100")
    n_bytes = 4 * 2**20
    for name, (us, decode_us) in ESPRESSO_V100_US.items():
        total = v100.compress[name].seconds(n_bytes) + v100.decompress[name].seconds(n_bytes)
        assert total * 1e6 == pytest.approx(us, rel=1e-9), name
        assert v100.decompress[name].seconds(n_bytes) * 1e6 == pytest.approx(decode_us), name
        assert h100.compress[name].seconds(4 * 2**26) < v100.compress[name].seconds(4 * 2**26)
    assert set(v100.compress) == set(ROOFLINE)
    assert "roofline" in v100.source


def test_bench_cli_measures_and_writes_a_table(tmp_path):
    out = tmp_path / "costs.json"
    r = CliRunner().invoke(
        app,
        [
            "bench",
            "compressors",
            "--sizes",
            "10,12,14,16",
            "--only",
            "fp16,topk",
            "--out",
            str(out),
        ],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output
    data = json.loads(out.read_text())
    assert set(data["compressors"]) == {"fp16", "topk"} and "measured" in data["source"]
    assert len(data["compressors"]["topk"]["points"]["compress"]) == 4
    r = CliRunner().invoke(app, ["bench", "compressors", "--device", "v100", "--json"])
    assert r.exit_code == 0 and "roofline" in json.loads(r.stdout)["source"]
    for args, msg in (
        (["--only", "zip"], "unknown compressor 'zip'"),
        (["--sizes", "a"], "comma-separated integers"),
        (["--device", "k80"], "unknown GPU 'k80'"),
    ):
        r = CliRunner().invoke(app, ["bench", "compressors", *args])
        assert r.exit_code == 2 and msg in r.stderr


def test_cpu_compression_is_the_measured_table_at_the_declared_cpus_bandwidth():
    """Issue #31: CPU compression costs are gcbench's compressors measured on the 2-core
    host (`cpu_table`, every compressor, both directions), a core taking twice the table's
    time, slower in proportion where a declared CPU gives a core less memory bandwidth
    than the host's 9.4 GB/s, never faster."""
    from gcbench.backends.simulate import HOST_CORE_GBS, costs_for, cpu_core_factor
    from gcbench.compress.costs import cpu_table
    from gcbench.compress.registry import names
    from gcbench.config import Cell

    table = cpu_table()
    assert table.device_key == "cpu" and set(names()) <= set(table.compress)
    assert set(names()) <= set(table.decompress)
    assert HOST_CORE_GBS == pytest.approx(9.4)

    def cell(**cluster):
        return Cell.model_validate({
            "model": {"name": "resnet50"}, "compressor": "efsignsgd", "strategy": "allgather",
            "network": {"inter_gbps": 25},
            "cluster": {"machines": 2, "gpus_per_machine": 8, "cpu_cores": 48, **cluster}})

    xeon = cell(cpu_gbs=281.6)  # ByteComp's 2 x Xeon 8260: 5.87 GB/s a core
    assert cpu_core_factor(cell().cluster) == 2.0
    assert cpu_core_factor(xeon.cluster) == pytest.approx(2 * 9.4 / (281.6 / 48))
    assert cpu_core_factor(cell(cpu_gbs=10_000).cluster) == 2.0  # never faster than the host
    n = 2**20
    for c in (cell(), xeon):
        costs = costs_for(c)
        f = cpu_core_factor(c.cluster)
        assert costs.cpu_compress_s(n) == pytest.approx(
            table.compress["efsignsgd"].seconds(4 * n) * f)
        assert costs.cpu_decompress_s(n) == pytest.approx(
            table.decompress["efsignsgd"].seconds(4 * n) * f)
