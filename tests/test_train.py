"""`mode: train` (issue #33): the train section, the offline datasets, the training loop
against one process, error feedback's effect, and the accuracy report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch
from pydantic import TypeAdapter

from gcbench.compress.specs import CompressorSpec
from gcbench.config import Cell
from gcbench.errors import ConfigError

TRAIN = {"dataset": "teacher", "steps": 40, "eval_every": 10, "lr": 0.1, "target": 0.5}


def cell(strategy="fp32", compressor="none", train=None, machines=2, gpus=2, **model):
    return Cell.model_validate({
        "model": {"name": "tiny-mlp", **model}, "compressor": compressor,
        "strategy": strategy, "device": "cpu", "mode": "train",
        "train": TRAIN if train is None else train,
        "network": {"intra": "pcie", "inter_gbps": 10},
        "cluster": {"machines": machines, "gpus_per_machine": gpus}})  # fmt: skip


def test_the_train_section_belongs_to_mode_train(tmp_path):
    c = cell()
    assert c.trained and c.flat()["dataset"] == "teacher" and c.flat()["train_steps"] == 40
    with pytest.raises(ValueError, match="needs a `train:` section"):
        Cell.model_validate({**c.model_dump(), "train": None})
    with pytest.raises(ValueError, match="applies to mode: train"):
        Cell.model_validate({**c.model_dump(), "mode": "measure"})
    with pytest.raises(ValueError, match="no such file"):
        cell(train={"dataset": str(tmp_path / "missing.pt")})
    # a cell of another mode keeps its id: the train columns are empty, not in its JSON
    sim = Cell.model_validate({**c.model_dump(exclude={"train"}), "mode": "simulate"})
    assert "train" not in sim.canonical_json() and sim.flat()["dataset"] is None


def test_error_feedback_off_is_part_of_the_spec_and_its_label():
    spec = TypeAdapter(CompressorSpec).validate_python
    off = spec("topk:ratio=0.01,ef=false")
    assert not off.ef and off.params() == {"ratio": 0.01}
    assert off.label() == "topk-1pct:ef=false" and spec(off.label()) == off
    assert spec("topk-1pct:ef=false") == off  # a preset with a parameter replaced
    assert spec("dgc-1pct:ratio=0.05").params() == {"ratio": 0.05, "sample_ratio": 0.01}
    assert spec("topk-1pct").label() == "topk-1pct" and spec("signsgd:ef=false").label() == (
        "signsgd:ef=false")
    for kind in ("fp16", "none", "acpsgd"):
        with pytest.raises(ValueError, match="keeps no error feedback"):
            spec(f"{kind}:ef=false")


def test_datasets_load_offline_and_fit_the_models(tmp_path):
    from gcbench.zoo.datasets import digits, fit_input, load, teacher

    d = digits()
    assert d.x.shape == (1438, 64) and d.x_test.shape == (359, 64) and d.classes == 10
    assert float(d.x.max()) <= 1.0 and float(d.x.min()) >= 0.0
    t = teacher()
    assert t.x.shape == (4096, 64) and len(t.x_test) == 1024
    assert torch.equal(t.y, teacher().y) and len(set(t.y.tolist())) >= 5  # fixed, not one class
    assert fit_input(d.x[:2], (3, 32, 32), "tiny-cnn").shape == (2, 3, 32, 32)
    with pytest.raises(ConfigError, match="takes inputs of shape"):
        fit_input(torch.zeros(2, 10), (3, 32, 32), "tiny-cnn")
    path = tmp_path / "mine.pt"
    torch.save({"x": torch.randn(50, 64), "y": torch.randint(0, 3, (50,))}, path)
    mine = load(str(path))
    assert len(mine.x) == 40 and len(mine.x_test) == 10 and mine.classes <= 3
    torch.save({"x": torch.randn(50, 64), "y": torch.randn(50)}, path)
    with pytest.raises(ConfigError, match="'y' must be"):
        load(str(path))
    path.write_text("not torch")
    with pytest.raises(ConfigError, match="not a torch.save'd tensor file"):
        load(str(path))


def test_one_process_learns_the_teacher():
    """`fit` alone (world 1): in 40 steps the teacher task's held-out accuracy climbs
    past 1.5x its majority class's share (20.5%; 39.6% measured), and the curve has an
    entry per evaluation."""
    from gcbench.cluster.train import fit
    from gcbench.zoo.datasets import teacher

    data = teacher()
    majority = float(torch.bincount(data.y_test).max()) / len(data.y_test)
    out = fit(cell(), 0, data)
    assert out["curve_step"] == [10, 20, 30, 40] and len(out["step_s"]) == 40
    assert out["final_metric"] > 1.5 * majority and out["curve_loss"][-1] < out["curve_loss"][0]


def _rows(acc: dict[str, list[float]], it: dict[str, float]) -> pd.DataFrame:
    rows = []
    for comp, values in acc.items():
        strategy = "fp32" if comp == "none" else "allgather"
        for rep, a in enumerate(values):
            rows.append({"cell_id": comp, "status": "ok", "model": "tiny-mlp",
                         "strategy": strategy, "compressor": comp, "repetition": rep,
                         "final_metric": a, "steps_to_target": 20.0 if a > 0.8 else None,
                         "iteration_s": it[comp], "projected_iteration_s": 10 * it[comp],
                         "curve_step": "[10, 20]", "curve_loss": "[2.0, 1.0]",
                         "curve_metric": json.dumps([0.5, a])})  # fmt: skip
    return pd.DataFrame(rows)


def test_a_gap_within_the_spread_is_no_gap_and_the_front_is_pareto():
    from gcbench.report.training import accuracy_table, pareto

    acc = {"none": [0.90, 0.92, 0.94], "topk-1pct": [0.91, 0.93, 0.89],
           "signsgd": [0.50, 0.52, 0.48]}
    df = _rows(acc, {"none": 0.02, "topk-1pct": 0.01, "signsgd": 0.005})
    t = accuracy_table(df).set_index("compressor")
    assert t.loc["topk-1pct", "verdict"] == "no gap"  # -1 pt, spread 2 pts
    assert t.loc["signsgd", "verdict"] == "-42.0 pts"
    assert math.isclose(t.loc["topk-1pct", "speedup"], 2.0)  # on the projected clock
    assert t.loc["signsgd", "reached"] == 0 and math.isnan(t.loc["signsgd", "time_to_target_s"])
    assert math.isclose(t.loc["none", "time_to_target_s"], 20 * 0.2)
    assert pareto([(1, 0), (2, -1), (4, -40), (1.5, -2), (0.5, 0)]) == [0, 1, 2]
    # two models: each cell against the fp32 of its own model, the model in its label
    other = _rows({"none": [0.50, 0.51, 0.52], "topk-1pct": [0.40, 0.41, 0.42]},
                  {"none": 0.02, "topk-1pct": 0.01})
    other["model"], other["cell_id"] = "tiny-cnn", other["cell_id"] + "-cnn"
    both = accuracy_table(pd.concat([df, other], ignore_index=True)).set_index("label")
    assert both.loc["tiny-cnn · allgather · topk-1pct", "verdict"] == "-10.0 pts"
    assert both.loc["tiny-mlp · allgather · topk-1pct", "verdict"] == "no gap"


@pytest.mark.slow
def test_four_ddp_workers_train_as_one_process_on_the_global_batch(ray_local):
    """fp32 on 2 x 2 Ray actors (DDP, torch's allreduce hook) against `fit` in this
    process with world 1 and the 4 ranks' global batch: tiny-mlp (no batch norm, no
    dropout), the same seed, the same loss curve to 1e-5 and the same accuracies."""
    from gcbench.cluster.train import fit, trained
    from gcbench.zoo.datasets import teacher

    c = cell(train={**TRAIN, "steps": 30, "eval_every": 5})
    rows = trained(c, 1)
    one = fit(c, c.seed, teacher(), world=1, batch=4 * c.model.batch_size)
    ddp = json.loads(rows[0]["curve_loss"])
    assert len(ddp) == 6 and ddp[-1] < ddp[0]
    assert max(abs(a - b) for a, b in zip(ddp, one["curve_loss"], strict=True)) < 1e-5
    assert json.loads(rows[0]["curve_metric"]) == pytest.approx(one["curve_metric"], abs=1e-6)
    assert rows[0]["hardware"].startswith("4 x CPU actor")


# Measured first (suites/convergence.yaml, 3 seeds, 200 steps, 2 actors): EF-SignSGD
# 90.5% +- 1.5, without error feedback 68.7% +- 8.2 (a 21.8-point gap)
EF_GAP = 0.10


@pytest.mark.slow
def test_removing_error_feedback_hurts_signsgd_visibly(ray_local, tmp_path):
    """EF-SignSGD with and without its error feedback on the shipped task (digits, the
    convergence suite's settings, 3 seeds): without it the final accuracy is lower by
    more than EF_GAP (half the gap measured) and by more than the seeds' spread, and the
    report's table says so."""
    import yaml

    from gcbench import load_results
    from gcbench.config import load_suite
    from gcbench.report import write_report
    from gcbench.report.training import accuracy_table
    from gcbench.runner import run_suite

    from conftest import ROOT

    shipped = yaml.safe_load((ROOT / "suites/convergence.yaml").read_text())
    shipped["grid"].update(strategy=["fp32", "allgather"],
                           compressor=["none", "efsignsgd", "efsignsgd:ef=false"])  # fmt: skip
    shipped["train"].pop("project")
    path = tmp_path / "ef.yaml"
    path.write_text(yaml.safe_dump(shipped))
    summary = run_suite(load_suite(path), tmp_path / "r", suite_file=str(path))
    assert summary.failed == 0
    table = accuracy_table(load_results(tmp_path / "r" / "convergence"))
    by = table.set_index("compressor")
    on, off = by.loc["efsignsgd"], by.loc["efsignsgd:ef=false"]
    assert on["seeds"] == off["seeds"] == 3
    assert on["accuracy"] - off["accuracy"] > max(EF_GAP, on["std"], off["std"])
    assert off["verdict"].endswith("pts") and off["verdict"].startswith("-")
    run = next((tmp_path / "r" / "convergence").iterdir())
    text = Path(write_report(run, tmp_path / "report")).read_text()
    assert "Final accuracy against fp32" in text and off["verdict"] in text
    # a trained run's iterations calibrate as a measured run's do (`calibrate --from`)
    from gcbench.calibrate_run import measured_cells

    cells = measured_cells(run)
    assert len(cells) == 3 and all(c.trained and t > 0 for c, t in cells)


def test_digits_without_scikit_learn_says_how_to_install_it(monkeypatch):
    import sys

    from gcbench.cluster.train import check_train_cell
    from gcbench.zoo.datasets import load_once

    load_once.cache_clear()  # (a digits loaded earlier in this process)
    monkeypatch.setitem(sys.modules, "sklearn", None)  # import sklearn raises ImportError
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(ConfigError, match=r"pip install 'gcbench\[train\]'") as e:
        check_train_cell(cell(train={**TRAIN, "dataset": "digits"}))
    assert len(e.value.messages) == 1


def test_simulate_points_mode_train_to_a_suite():
    from test_cli import invoke

    r = invoke("simulate", "--model", "tiny-mlp", "--inter-gbps", "10", "--mode", "train")
    assert r.exit_code == 2 and r.stderr.startswith("error: --mode: train needs a `train:`")
    assert "gcbench run" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_a_global_batch_larger_than_the_dataset_is_one_line(tmp_path):
    from gcbench.cluster.train import fit
    from gcbench.zoo.datasets import load

    path = tmp_path / "small.pt"
    torch.save({"x": torch.randn(40, 64), "y": torch.randint(0, 3, (40,))}, path)
    with pytest.raises(ConfigError, match="more than the dataset's 32 training samples"):
        fit(cell(), 0, load(str(path)), world=4)


def test_a_dataset_that_does_not_fit_the_model_is_refused_before_ray(tmp_path):
    from gcbench.cluster.train import check_train_cell

    path = tmp_path / "ten.pt"
    torch.save({"x": torch.randn(50, 10), "y": torch.randint(0, 3, (50,))}, path)
    with pytest.raises(ConfigError, match=r"tiny-mlp takes inputs of shape \(64,\)"):
        check_train_cell(cell(train={**TRAIN, "dataset": str(path)}))


def test_an_image_folder_loads_with_its_classes_and_splits(tmp_path):
    """ImageFolder's layout: root/<class>/<image>, classes sorted; images of other sizes
    resized to the first's; with train/ and val/ those are the splits; fitted to an image
    model's input (tiny-cnn: 3 x 32 x 32)."""
    from PIL import Image

    from gcbench.zoo.datasets import fit_input, load

    def folder(root, sizes):
        for cls, shade in (("cat", 40), ("dog", 200)):
            (root / cls).mkdir(parents=True)
            for i, size in enumerate(sizes):
                Image.new("RGB", size, (shade, shade + i, 0)).save(root / cls / f"{i}.png")
        (root / "cat" / "notes.txt").write_text("not an image")

    folder(tmp_path / "flat", [(16, 12)] * 4 + [(20, 20)])
    d = load(str(tmp_path / "flat"))
    assert d.classes == 2 and len(d.x) + len(d.x_test) == 10 and d.x.shape[1:] == (3, 12, 16)
    assert 0.0 <= float(d.x.min()) and float(d.x.max()) <= 1.0
    pixel = {int(c): round(float(v) * 255) for c, v in zip(d.y, d.x[:, 0, 0, 0], strict=True)}
    assert pixel == {0: 40, 1: 200}  # cat before dog: the sorted class ids
    assert fit_input(d.x, (3, 32, 32), "tiny-cnn").shape == (8, 3, 32, 32)
    folder(tmp_path / "split" / "train", [(8, 8)] * 3)
    folder(tmp_path / "split" / "val", [(8, 8)])
    s = load(str(tmp_path / "split"))
    assert (len(s.x), len(s.x_test), s.classes) == (6, 2, 2)
    (tmp_path / "empty" / "a").mkdir(parents=True)
    with pytest.raises(ConfigError, match="no images in its class folders"):
        load(str(tmp_path / "empty"))


@pytest.mark.gpu
def test_training_runs_on_a_gpu_actor(ray_local):
    """Where a CUDA device is visible: one GPU actor (NCCL) trains the teacher task; its
    loss falls, and the run was on the GPU (the hardware column names it)."""
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible (torch.cuda.is_available() is False)")
    from gcbench.cluster.train import trained
    from gcbench.compress.costs import device_key

    c = Cell.model_validate({**cell().model_dump(), "device": device_key("cuda") or "h100",
                             "cluster": {"machines": 1, "gpus_per_machine": 1}})  # fmt: skip
    row = trained(c, 1)[0]
    loss = json.loads(row["curve_loss"])
    assert loss[-1] < loss[0] and "CPU actor" not in row["hardware"]


def test_without_a_target_the_headline_is_the_fastest_that_loses_no_accuracy():
    """A trained run with no target accuracy: the answer is the fastest cell whose
    accuracy is within the seeds' spread of fp32's (or above), not the fastest cell."""
    import gcbench
    from gcbench.report.headline import headline
    from gcbench.results.schema import record

    train = {"dataset": "teacher", "steps": 20, "eval_every": 10}
    rows = []
    for strategy, comp, acc, it in (("fp32", "none", 0.90, 0.03),
                                    ("allgather", "topk-1pct", 0.89, 0.02),
                                    ("allgather", "signsgd:ef=false", 0.5, 0.01)):
        c = cell(strategy, comp, train, machines=2, gpus=1)
        for rep in range(3):
            m = {"iteration_s": it, "final_metric": acc + 0.01 * rep, "curve_step": "[10]",
                 "curve_loss": "[1.0]", "curve_metric": json.dumps([acc])}
            rows.append(record(suite="t", cell_id=c.id, config=c.flat(), metrics=m, error=None,
                               repetition=rep, gcbench_version=gcbench.__version__, run_id="r",
                               meta={}))  # fmt: skip
    (entry,) = headline(pd.DataFrame(rows))
    assert entry["winner"] == "allgather with topk-1pct" and entry["speedup_over_fp32"] == 1.5
    assert "is fastest with no accuracy lost to fp32 (measured time) for tiny-mlp" in (
        entry["sentence"])


def test_the_report_ranks_by_every_seed_not_the_first(tmp_path):
    """The run page's headline reads the trained cells' seeds, not their per-cell means:
    top-k is faster and its first seed reaches the target, its second does not, so fp32
    (every seed there) is the answer."""
    import gcbench
    from gcbench.report import write_report
    from gcbench.results.schema import record
    from gcbench.results.store import RunStore

    store, _ = RunStore.open(tmp_path / "results", "train")
    train = {**TRAIN, "target": 0.8}
    grid = [cell("fp32", "none", train, 2, 1), cell("allgather", "topk-1pct", train, 2, 1)]
    store.write_manifest({"suite": "train", "status": "finished", "grid": [c.id for c in grid]})
    for c, it, reached in ((grid[0], 0.02, (20, 20)), (grid[1], 0.01, (10, None))):
        rows = [record(suite="train", cell_id=c.id, config=c.flat(), error=None, repetition=rep,
                       metrics={"iteration_s": it, "final_metric": 0.9, "curve_step": "[10]",
                                "curve_loss": "[1.0]", "curve_metric": "[0.9]",
                                "steps_to_target": steps},
                       gcbench_version=gcbench.__version__, run_id=store.run_id, meta={})
                for rep, steps in enumerate(reached)]  # fmt: skip
        store.write_cell(c.id, rows, [], None)
    page = write_report(store.path, tmp_path / "out")
    (entry,) = json.loads((Path(page).parent / "headline.json").read_text())
    assert entry["winner"] == "fp32" and "every seed" in entry["sentence"]
