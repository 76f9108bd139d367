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
