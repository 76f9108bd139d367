"""A measured GPU cost table in a cell (`compressor_costs`): the simulator uses it in place
of the device's roofline, the cell id follows the file's content, and a table measured on
another GPU (or without the compressor) is refused in one line."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from gcbench.backends.simulate import simulate_cell
from gcbench.cli import app
from gcbench.compress.costs import CostModel, CostTable, Segment
from gcbench.config import Cell, expand, load_suite
from gcbench.errors import ConfigError

from conftest import write


def table(tmp_path, name="h100.json", device_key="h100", fixed_s=1e-3, kinds=("dgc",)):
    t = CostTable("NVIDIA H100 80GB HBM3 (cuda:0, torch 2.13.0)", "a test", device_key=device_key)
    for kind in kinds:
        t.compress[kind] = CostModel((Segment(math.inf, fixed_s, 0.0),))
        t.decompress[kind] = CostModel((Segment(math.inf, fixed_s / 2, 0.0),))
    path = tmp_path / name
    path.write_text(json.dumps(t.to_json()))
    return path


def cell(**kw) -> Cell:
    data = {
        "model": "tiny-mlp",
        "compressor": "dgc-1pct",
        "network": {"inter_gbps": 10},
        "cluster": {"machines": 2, "gpus_per_machine": 4},
        "strategy": "allgather",
        "device": "h100",
    }
    data.update(kw)
    return Cell.model_validate(data)


def test_the_measured_table_replaces_the_roofline(tmp_path):
    roofline = simulate_cell(cell()).metrics
    ms = simulate_cell(cell(compressor_costs=str(table(tmp_path, fixed_s=1e-3)))).metrics
    slow = simulate_cell(
        cell(compressor_costs=str(table(tmp_path, "slow.json", fixed_s=4e-3)))
    ).metrics
    # one bucket: one compression, and a decompression of each of the 7 other GPUs' payloads
    assert ms["compress_total_s"] == pytest.approx(1e-3 + 7 * 0.5e-3, rel=1e-9)
    assert slow["compress_total_s"] == pytest.approx(4 * ms["compress_total_s"], rel=1e-9)
    assert roofline["compress_total_s"] < ms["compress_total_s"]
    assert ms["wire_bytes"] == roofline["wire_bytes"]


def test_the_cell_id_follows_the_tables_content(tmp_path):
    path = table(tmp_path)
    a = cell(compressor_costs=str(path))
    table(tmp_path, fixed_s=2e-3)  # same path, new content
    b = cell(compressor_costs=str(path))
    assert a.id != b.id != cell().id
    assert a.flat()["compressor_costs"] == str(path.resolve())
    assert cell().id == cell(compressor_costs=None).id  # the default leaves ids alone


@pytest.mark.parametrize(
    "make,message",
    [
        (lambda p: table(p, device_key="a100"), "measured on a100, and the device is h100"),
        (lambda p: table(p, device_key=None), "not in the device table"),
        (lambda p: write(p, "x.json", "{}"), "not a gcbench compressor cost table"),
        (lambda p: p / "missing.json", "cannot read"),
    ],
)
def test_a_wrong_table_is_refused(tmp_path, make, message):
    path = make(tmp_path)
    with pytest.raises(ValueError, match=message):
        cell(compressor_costs=str(path))
    flags = ["--model", "tiny-mlp", "--inter-gbps", "10", "--machines", "2", "--strategy",
             "allgather", "--compressor", "dgc", "--device", "h100"]  # fmt: skip
    r = CliRunner().invoke(app, ["simulate", *flags, "--compressor-costs", str(path)])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("error: --compressor-costs") and message in r.stderr


def test_a_table_without_the_compressor_fails_the_cell(tmp_path):
    c = cell(compressor_costs=str(table(tmp_path, kinds=("fp16",))))
    with pytest.raises(ConfigError, match="has no dgc costs"):
        simulate_cell(c)


def test_a_suite_names_its_table_relative_to_itself(tmp_path):
    (tmp_path / "costs").mkdir()
    table(tmp_path / "costs")
    text = (
        "name: measured\ndevice: h100\ncompressor_costs: costs/h100.json\ngrid:\n"
        "  model: [tiny-mlp]\n  compressor: [dgc-1pct]\n  strategy: [allgather]\n"
        "  network: [{inter_gbps: 10}]\n  cluster: [{machines: 2, gpus_per_machine: 4}]\n"
    )
    cells = expand(load_suite(write(tmp_path, "s.yaml", text)))
    assert cells[0].compressor_costs.file == str((tmp_path / "costs/h100.json").resolve())
    wrong = text.replace("device: h100", "device: v100")
    with pytest.raises(ConfigError) as e:
        load_suite(write(tmp_path, "w.yaml", wrong))
    assert "measured on h100, and the device is v100" in e.value.messages[0]
    assert e.value.messages[0].startswith(str(tmp_path / "w.yaml"))
