"""The CLI, in-process (typer's CliRunner), plus the module entry point once."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.config import suite_schema

from conftest import ROOT, TINY_SUITE, write

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_validate_shipped_suites_and_cluster_files():
    r = invoke(
        "validate",
        *(str(p) for p in sorted((ROOT / "suites").glob("*.yaml"))),
        "--cluster",
        str(ROOT / "cluster.yaml"),
        "--cluster",
        str(ROOT / "cluster.local.yaml"),
    )
    assert r.exit_code == 0, r.output
    assert "ok:" in r.stdout and "smoke" in r.stdout and "30 cells" in r.stdout


def test_bad_suite_exits_2_with_lines_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    bad = write(
        tmp_path,
        "bad.yaml",
        "name: bad\ncolour: 1\ngrid:\n  model: nope\n"
        "  network: {inter_gbps: 0}\n  cluster: {machines: 0}\n",
    )
    for args in (["validate", str(bad)], ["run", str(bad)]):
        r = invoke(*args)
        assert r.exit_code == 2
        lines = r.stderr.strip().splitlines()
        assert [line.split(":")[2] for line in lines] == ["2", "4", "5", "6"]
        assert all(line.startswith(f"error: {bad}:") for line in lines)
        assert "Traceback" not in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


def test_bad_only_flag_and_missing_file(tmp_path):
    r = invoke(
        "run", str(ROOT / "suites/smoke.yaml"), "--only", "colour=red", "--results", str(tmp_path)
    )
    assert r.exit_code == 2 and "unknown key 'colour'" in r.stderr
    r = invoke(
        "run", str(ROOT / "suites/smoke.yaml"), "--only", "model=nope", "--results", str(tmp_path)
    )
    assert r.exit_code == 2 and "no cells left" in r.stderr
    r = invoke("validate", str(tmp_path / "missing.yaml"))
    assert r.exit_code == 2 and "cannot read" in r.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.ray
def test_run_then_report(ray_local, tmp_path):
    suite = write(tmp_path, "tiny.yaml", TINY_SUITE)
    r = invoke(
        "run",
        str(suite),
        "--results",
        str(tmp_path / "results"),
        "--reports",
        str(tmp_path / "reports"),
    )
    assert r.exit_code == 0, r.output
    assert "16 cells: 16 ok now, 0 failed" in r.stdout
    assert (tmp_path / "reports/tiny/index.html").is_file()
    r = invoke("report", str(tmp_path / "results/tiny"), "--out", str(tmp_path / "again"))
    assert r.exit_code == 0 and (tmp_path / "again/index.html").is_file()
    assert (tmp_path / "again/plotly.min.js").is_file()
    # a fresh run of some cells (issue #35 item 4: every `run --only` crashed writing its
    # report, and `report` on that run crashed the same way)
    only = ["--only", "model=tiny-mlp", "--only", "machines=2", "--fresh"]
    out = ["--results", str(tmp_path / "results"), "--reports", str(tmp_path / "reports")]
    r = invoke("run", str(suite), *only, *out)
    assert r.exit_code == 0, r.output
    assert "4 cells: 4 ok now, 0 failed" in r.stdout
    pages = [p.read_text() for p in (tmp_path / "reports/tiny").glob("2*/index.html")]
    assert sum("<dt>only</dt><dd>model=tiny-mlp machines=2</dd>" in p for p in pages) == 1
    # an emulated cell the cluster cannot hold is refused as `run` refuses it (it was exit
    # 1, "the Ray cluster changed during the run")
    r = invoke("simulate", "--model", "tiny-mlp", "--inter-gbps", "10", "--mode", "emulate",
               "--machines", "64")  # fmt: skip
    assert r.exit_code == 2 and r.stderr.startswith("error: emulate: 512 actors"), r.output
    assert "changed during the run" not in r.stderr


def test_report_of_a_non_results_folder(tmp_path):
    r = invoke("report", str(tmp_path))
    assert r.exit_code == 2 and "not a gcbench run folder" in r.stderr
    r = invoke("report", str(tmp_path / "nowhere"))
    assert r.exit_code == 2 and "nowhere: no such folder" in r.stderr


def test_schema_models_compressors():
    assert json.loads(invoke("schema").stdout) == suite_schema()
    models = json.loads(invoke("models", "--json").stdout)
    assert {"resnet50", "tiny-mlp", "tiny-cnn"} <= {m["name"] for m in models}
    comp = json.loads(invoke("compressors", "--json").stdout)
    assert comp["kinds"]["topk"] == {"ratio": 0.01}
    assert comp["presets"]["powersgd-r4"] == {"kind": "powersgd", "rank": 4}


def test_module_entry_point_help():
    out = subprocess.run(
        [sys.executable, "-m", "gcbench", "--help"], capture_output=True, text=True, check=True
    ).stdout
    for command in ("run", "validate", "report", "schema", "models", "compressors"):
        assert command in out


def test_usage_errors_are_one_line_with_exit_2():
    """The installed command (`gcbench.cli.main`): a misspelt flag, a value of the wrong
    type or a missing argument is one `error:` line naming where to look, exit 2;
    `plan` has no --mode (it plans with the simulator)."""
    for args, said in (
        (["plan", "--model", "tiny-mlp", "--inter-gbps", "25", "--mode", "emulate"],
         "No such option: --mode"),
        (["simulate", "--model", "resnet50", "--inter-gbps", "abc"], "'--inter-gbps'"),
        (["run"], "Missing argument"),
        (["profile", "tiny-mlp", "--iterations", "0"], "--iterations must be > 0"),
    ):  # fmt: skip
        r = subprocess.run([sys.executable, "-m", "gcbench", *args], capture_output=True,
                           text=True, timeout=120)  # fmt: skip
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
        assert said in r.stderr and r.stdout == ""


def test_a_plan_that_cannot_be_made_is_the_cells_settings_exit_2():
    """Brute force over resnet50's 161 tensors: a PlanError, one line, exit 2 (what was
    asked cannot be done, as a bad flag)."""
    r = CliRunner().invoke(app, ["simulate", "--model", "resnet50", "--inter-gbps", "25",
                                 "--strategy", "brute-force"])  # fmt: skip
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "brute force over" in r.stderr


def test_a_misspelt_strategy_or_compressor_gets_a_suggestion(tmp_path):
    r = CliRunner().invoke(app, ["simulate", "--model", "resnet50", "--inter-gbps", "25",
                                 "--strategy", "fp61"])  # fmt: skip
    assert r.exit_code == 2 and "unknown strategy 'fp61'; did you mean 'fp16'?" in r.stderr
    r = CliRunner().invoke(app, ["simulate", "--model", "resnet50", "--inter-gbps", "25",
                                 "--strategy", "allgather",
                                 "--compressor", "topk-1pc"])  # fmt: skip
    assert r.exit_code == 2 and "(did you mean 'topk-1pct'?)" in r.stderr
    suite = write(tmp_path, "s.yaml", "name: s\ngrid:\n  model: [resnet50]\n  strategy: [fp23]\n"
                  "  network: [{inter_gbps: 10}]\n  cluster: [{machines: 2}]\n")  # fmt: skip
    r = CliRunner().invoke(app, ["validate", str(suite)])
    assert r.exit_code == 2 and "s.yaml:4:" in r.stderr and "did you mean 'fp32'?" in r.stderr


def test_a_suite_with_brute_force_on_a_large_model_is_refused_up_front(tmp_path):
    """`validate` and `run` refuse a brute-force cell whose model has more tensors than
    brute force takes (resnet50: 161 > 10), naming the suite's strategy line; nothing is
    written. On tiny-mlp (2 tensors) it validates."""
    text = ("name: b\ngrid:\n  model: [{model}]\n  strategy: [fp32, brute-force]\n"
            "  compressor: [dgc-1pct]\n  network: [{{inter_gbps: 10}}]\n"
            "  cluster: [{{machines: 2}}]\n")  # fmt: skip
    suite = write(tmp_path, "b.yaml", text.format(model="resnet50"))
    for args in (["validate", str(suite)],
                 ["run", str(suite), "--results", str(tmp_path / "r")]):  # fmt: skip
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
        assert r.stderr.startswith(f"error: {suite}:4: brute-force on resnet50: brute force")
    assert not (tmp_path / "r").exists()
    ok = write(tmp_path, "ok.yaml", text.format(model="tiny-mlp"))
    assert CliRunner().invoke(app, ["validate", str(ok)]).exit_code == 0


def test_a_sequence_length_for_a_model_without_one_is_refused(tmp_path):
    """`seq_len` on a vision model was accepted (and ignored) by suites and `simulate`,
    refused by `gcbench model`: now refused everywhere, one line."""
    r = CliRunner().invoke(app, ["simulate", "--model", "resnet50", "--inter-gbps", "25",
                                 "--seq-len", "128"])  # fmt: skip
    assert r.exit_code == 2 and r.stderr == "error: --seq-len: resnet50 is not a sequence model\n"
    suite = write(tmp_path, "s.yaml", "name: s\ngrid:\n  model: [{name: resnet50, seq_len: 8}]\n"
                  "  strategy: [fp32]\n  network: [{inter_gbps: 10}]\n"
                  "  cluster: [{machines: 2}]\n")  # fmt: skip
    r = CliRunner().invoke(app, ["validate", str(suite)])
    assert r.exit_code == 2 and "s.yaml:3:" in r.stderr and "not a sequence model" in r.stderr
    # `profile` took it (a review, 2026-11-29), and `model` and `profile` took batches and
    # sequences past a suite's bounds: torch's storage-size overflow, a traceback
    for args, said in (
        (["profile", "tiny-mlp", "--seq-len", "5"], "--seq-len: tiny-mlp is not a sequence"),
        (["model", "resnet50", "--batch", "10000000000000"], "--batch must be ≤ 1,048,576"),
        (["model", "bert-base", "--seq-len", "100000000"], "--seq-len must be ≤ 65,536"),
        (["profile", "resnet50", "--batch", "10000000000000"], "--batch must be ≤ 1,048,576"),
    ):  # fmt: skip
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 2 and r.stderr.startswith(f"error: {said}"), (args, r.output)


def test_validate_is_quiet_on_every_shipped_suite():
    """Issue #36: at most 3 lines a shipped suite (the drop reasons, 43 lines for
    nvlink100, behind --verbose)."""
    for path in sorted((ROOT / "suites").glob("*.yaml")):
        r = CliRunner().invoke(app, ["validate", str(path)])
        assert r.exit_code == 0, (path, r.output)
        assert len(r.output.strip().splitlines()) <= 3, (path, r.output)


def test_ctrl_c_wrapped_by_a_library_is_still_an_interrupt():
    """Ctrl-C that lands inside pydantic's serializer (a cell's id is a model_dump) comes
    back as a PydanticSerializationError caused by KeyboardInterrupt: `gcbench run`
    caught only KeyboardInterrupt and exited 1 with a traceback instead of 130 (seen in
    tests/test_resume.py::test_ctrl_c_stops_cleanly, 2026-11-29)."""
    from pydantic import BaseModel, field_serializer

    from gcbench.cli.common import by_ctrl_c

    class Interrupted(BaseModel):
        x: int = 1

        @field_serializer("x")
        def _s(self, v: int) -> int:
            raise KeyboardInterrupt

    with pytest.raises(Exception) as got:
        Interrupted().model_dump(mode="json")
    assert not isinstance(got.value, KeyboardInterrupt) and by_ctrl_c(got.value)
    assert by_ctrl_c(KeyboardInterrupt()) and not by_ctrl_c(ValueError("no"))
    looped = ValueError("a cycle")
    looped.__context__ = RuntimeError("back")
    looped.__context__.__context__ = looped
    assert not by_ctrl_c(looped)
