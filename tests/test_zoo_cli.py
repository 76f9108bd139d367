"""`gcbench model`, `gcbench models`, `gcbench profile`, and profile files in suites."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gcbench.backends.simulate import cell_profile, ddp_copy_s, simulate_cell
from gcbench.cli import app
from gcbench.config import expand, load_suite
from gcbench.zoo.profile import model_profile

from conftest import write

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_model_json_lists_every_tensor():
    r = invoke("model", "resnet50", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["params"] == 25_557_032 and round(out["mib"], 2) == 97.49
    assert len(out["tensors"]) == 161 and out["tensors"][0]["name"] == "fc.bias"
    assert out["forward_s"] > 0 and out["update_s"] > 0
    assert out["backward_s"] == pytest.approx(sum(t["backward_s"] for t in out["tensors"]))


def test_model_text_options():
    r = invoke("model", "gpt2", "--batch", "2", "--seq-len", "128", "--device", "h100")
    assert r.exit_code == 0, r.output
    assert "124,439,808" in r.stdout and "474.70 MiB" in r.stdout
    assert "batch      2 sequences, seq_len 128" in r.stdout
    assert "transformer.wte.weight" in r.stdout.splitlines()[-1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["model", "resnt50"], "unknown model 'resnt50' (did you mean 'resnet50'?)"),
        (["model", "resnet50", "--batch", "0"], "--batch must be > 0, got 0"),
        (["model", "resnet50", "--seq-len", "8"], "resnet50 is not a sequence model"),
        (["model", "resnet50", "--device", "k80"], "unknown device 'k80'"),
        (["profile", "nope"], "unknown model 'nope'"),
        (["profile", "tiny-mlp", "--torch-device", "tpu"], "must be cpu or cuda"),
    ],
)
def test_bad_model_arguments_are_one_line_exit_2(args, message):
    r = invoke(*args)
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines() == [f"error: {r.stderr.strip()[7:]}"]
    assert message in r.stderr


def test_models_lists_sizes():
    rows = {m["name"]: m for m in json.loads(invoke("models", "--json").stdout)}
    assert rows["ugatit"]["mib"] == 2558.75 and rows["gpt2"]["seq_len"] == 1024
    assert "bert-large" in invoke("models").stdout


def test_profile_command_writes_a_file_a_suite_can_use(tmp_path):
    out = tmp_path / "tiny.json"
    r = invoke("profile", "tiny-mlp", "--iterations", "2", "--warmup", "1", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert f"profile: {out}" in r.stdout
    data = json.loads(out.read_text())
    assert data["format"] == "gcbench-profile" and data["source"] == "measured"
    assert len(data["tensors"]) == 6

    suite = write(
        tmp_path,
        "s.yaml",
        "name: s\ngrid:\n  model: [{name: tiny-mlp, profile: tiny.json}]\n"
        "  network: {inter_gbps: 10}\n  cluster: {machines: 2, gpus_per_machine: 2}\n",
    )
    (cell,) = expand(load_suite(suite))
    assert cell.model.profile == str(out) and cell.model.batch_size == 16
    p = cell_profile(cell)
    assert p.source == "measured"
    # the file's backward, each gradient then copied into its DDP bucket (4 GPUs)
    copies = sum(ddp_copy_s(t.numel, cell) for t in p.tensors)
    assert p.backward_s == pytest.approx(sum(t["backward_s"] for t in data["tensors"]) + copies)
    assert simulate_cell(cell).metrics["compute_s"] == pytest.approx(p.compute_s)
    assert (
        cell.id
        != next(
            iter(
                expand(
                    load_suite(
                        write(
                            tmp_path,
                            "z.yaml",
                            suite.read_text().replace(", profile: tiny.json", ""),
                        )
                    )
                )
            )
        ).id
    )


def test_profile_in_a_suite_csv_and_errors(tmp_path):
    write(tmp_path, "r.csv", "name,numel,ready_s\n2.bias,10,0.001\n2.weight,1280,0.002\n")
    write(tmp_path, "m.json", json.dumps({"format": "gcbench-profile", "version": 1,
          "model": "tiny-mlp", "batch_size": 16, "tensors": [{"name": "w", "numel": 4,
          "backward_s": 0.01}]}))  # fmt: skip
    suite = write(
        tmp_path,
        "s.yaml",
        "name: s\ngrid:\n  model:\n  - {name: my-net, batch_size: 8, profile: r.csv}\n"
        "  - {name: tiny-mlp, batch_size: 4, profile: m.json}\n"
        "  - {name: tiny-mlp, profile: missing.json}\n"
        "  network: {inter_gbps: 10}\n  cluster: {machines: 2, gpus_per_machine: 2}\n",
    )
    from gcbench.errors import ConfigError

    with pytest.raises(ConfigError) as e:
        load_suite(suite)
    lines = e.value.messages
    assert len(lines) == 2
    assert lines[0].startswith(f"{suite}:5: grid.model.1: ") and "batch_size 4 differs" in lines[0]
    assert lines[1].startswith(f"{suite}:6: grid.model.2: ") and "cannot read profile" in lines[1]
    good = write(
        tmp_path,
        "g.yaml",
        suite.read_text().split("  - {name: tiny-mlp, batch")[0]
        + "  network: {inter_gbps: 10}\n  cluster: {machines: 2, gpus_per_machine: 2}\n",
    )
    (cell,) = expand(load_suite(good))
    p = cell_profile(cell)
    assert (p.name, p.batch_size, len(p.tensors)) == ("my-net", 8, 2)
    assert p.forward_s == pytest.approx(0.001)  # not a zoo model: half the backward
    assert any("estimated" in n for n in p.notes)


def test_simulation_uses_the_zoo_profile_by_default(tmp_path):
    suite = write(
        tmp_path,
        "s.yaml",
        "name: s\ngrid:\n  model: resnet50\n  network: {inter_gbps: 100}\n"
        "  cluster: {machines: 1, gpus_per_machine: 1}\n",
    )
    (cell,) = expand(load_suite(suite))
    assert cell_profile(cell) == model_profile("resnet50", 32, "v100")


@pytest.mark.slow  # the first forward on the meta device: about a second
def test_a_batch_that_cannot_fit_is_refused_before_anything_is_allocated():
    """`gcbench profile resnet50 --batch 100000` died allocating 60 GB (issue #35 item
    13): the iteration's memory is counted on the meta device first, and one too large
    for this host is one line, exit 2, in about a second."""
    from typer.testing import CliRunner

    from gcbench.cli import app
    from gcbench.zoo.measure import available_bytes, iteration_bytes

    need = iteration_bytes("resnet50", 100_000, None)
    have = available_bytes("cpu")
    assert have is not None and need > 100 * have  # thousands of GiB
    assert iteration_bytes("resnet50", 2, None) < need / 10_000  # it follows the batch
    r = CliRunner().invoke(app, ["profile", "resnet50", "--batch", "100000"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
    assert "resnet50 at batch 100000: an iteration needs about" in r.stderr
    assert "lower --batch" in r.stderr


def test_cache_says_where_the_traces_are_and_clears_them(tmp_path, monkeypatch):
    """Issue #34: the trace cache's folder is documented, overridable (GCBENCH_CACHE) and
    cleared by a command; a cleared trace is made again."""
    from gcbench.zoo.profile import cached_trace
    from gcbench.zoo.traces import cache_path

    monkeypatch.setenv("GCBENCH_CACHE", str(tmp_path))
    cached_trace.cache_clear()
    cached_trace("tiny-mlp", 16, None)
    assert cache_path("tiny-mlp", 16, None).is_file()
    out = json.loads(invoke("cache", "--json").stdout)
    assert (out["folder"], out["traces"], out["removed"]) == (str(tmp_path / "traces"), 1, 0)
    out = json.loads(invoke("cache", "--clear", "--json").stdout)
    assert out["removed"] == 1 and not cache_path("tiny-mlp", 16, None).exists()
    cached_trace.cache_clear()
    cached_trace("tiny-mlp", 16, None)
    assert cache_path("tiny-mlp", 16, None).is_file()
    cached_trace.cache_clear()
