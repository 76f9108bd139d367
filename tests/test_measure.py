"""`mode: measure` (issue #32): the zoo model trained with DDP on Ray actors, the cell's
compressor a DDP hook, timed; refused with the reason for what is not a DDP hook."""

from __future__ import annotations

from pathlib import Path

import pytest

from gcbench.cluster.measure import bucket_cap_mb, check_cell, hook_spec
from gcbench.config import Cell
from gcbench.errors import ConfigError


def cell(strategy="fp32", compressor="none", model="tiny-mlp", machines=2, gpus=2, **kw):
    return Cell.model_validate({
        "model": model, "compressor": compressor, "strategy": strategy, "device": "cpu",
        "network": {"intra": "pcie", "inter_gbps": 10}, "mode": "measure",
        "cluster": {"machines": machines, "gpus_per_machine": gpus, **kw}})  # fmt: skip


def test_what_is_not_a_ddp_hook_is_refused_with_the_reason():
    for strategy, compressor, why in [
        ("ps", "none", "ps is not a DDP communication hook"),
        ("bytecomp", "dgc-1pct", "bytecomp is not a DDP communication hook"),
    ]:
        servers = {"cpu_servers": 1} if strategy == "ps" else {}
        with pytest.raises(ConfigError, match=why) as e:
            check_cell(cell(strategy, compressor, **servers))
        assert len(e.value.messages) == 1 and "\n" not in e.value.messages[0]


def test_each_strategy_measures_its_hook():
    assert hook_spec(cell("fp32")) == ("none", None)
    assert hook_spec(cell("fp16")) == ("fp16", None)
    assert hook_spec(cell("allgather", "dgc-1pct")) == ("dgc-1pct", "allgather")
    # error feedback off travels in the spec the hook is built from
    assert hook_spec(cell("allgather", "topk:ratio=0.01,ef=false")) == (
        "topk-1pct:ef=false", "allgather")
    assert hook_spec(cell("allgather", "randomk-1pct"))[1] == "allgather"  # not allreduced
    assert hook_spec(cell("powersgd", "powersgd-r4")) == ("powersgd-r4", None)
    assert bucket_cap_mb("ddp") == 25.0 and bucket_cap_mb("fixed:1048576") == 1.0


@pytest.mark.slow
def test_a_measure_suite_trains_with_ddp_and_reports_its_prediction(ray_local, tmp_path):
    """Through `gcbench run`: 2 x 2 actors train tiny-mlp with fp32 (torch's hook) and
    the DGC hook; the ranks' weights agree after the steps (`measured` checks their
    checksums, or fails the cell); each repetition is a timed iteration with the
    simulator's prediction beside it; DGC's hook runs synchronously, so its seconds are
    the exposed communication, and it sends a small share of the gradient; the run page
    draws measured against predicted."""
    from gcbench import load_results
    from gcbench.config import load_suite
    from gcbench.report import write_report
    from gcbench.runner import run_suite

    from conftest import write

    suite = load_suite(write(tmp_path, "m.yaml", (
        "name: m\nmode: measure\ndevice: cpu\nrepetitions: 3\ngrid:\n  model: tiny-mlp\n"
        "  strategy: [fp32, allgather]\n  compressor: [dgc-1pct]\n"
        "  network: {intra: pcie, inter_gbps: 10}\n"
        "  cluster: {machines: 2, gpus_per_machine: 2}\n")))  # fmt: skip
    summary = run_suite(suite, tmp_path / "r")
    assert summary.failed == 0
    rows = load_results(tmp_path / "r" / "m")
    assert len(rows) == 6 and set(rows["mode"]) == {"measure"}
    assert (rows["iteration_s"] > 0).all() and (rows["predicted_iteration_s"] > 0).all()
    dgc = rows[rows["strategy"] == "allgather"]
    assert ((dgc["comm_exposed_s"] > 0) & (dgc["comm_exposed_s"] < dgc["iteration_s"])).all()
    assert (dgc["compute_s"] - (dgc["iteration_s"] - dgc["comm_exposed_s"])).abs().max() < 1e-12
    assert rows[rows["strategy"] == "fp32"]["comm_exposed_s"].isna().all()  # torch's: async
    gradient = rows["model_mib"].iloc[0] * 2**20
    assert (0 < dgc["wire_bytes"]).all() and (dgc["wire_bytes"] < 0.1 * gradient).all()
    run = next((tmp_path / "r" / "m").iterdir())
    page = write_report(run, tmp_path / "report")
    text = Path(page).read_text()
    assert "Measured against predicted" in text and "Breakdown, measured and predicted" in text
    assert (rows["predicted_compute_s"] > 0).all() and (rows["predicted_exposed_s"] >= 0).all()
    # the iteration's parts, marked inside it: they fill most of it and never exceed it;
    # DGC's hook runs inside backward; the predicted parts are the profile's compute
    parts = rows["forward_s"] + rows["backward_s"] + rows["update_s"]
    assert (rows[["forward_s", "backward_s", "update_s"]] > 0).all().all()
    assert (parts <= rows["iteration_s"]).all() and (parts >= 0.5 * rows["iteration_s"]).all()
    assert (dgc["backward_s"] >= dgc["comm_exposed_s"]).all()
    fp32 = rows[rows["strategy"] == "fp32"]
    predicted = fp32[["predicted_forward_s", "predicted_backward_s", "predicted_update_s"]]
    assert (predicted.sum(axis=1) - fp32["predicted_compute_s"]).abs().max() < 1e-9


@pytest.mark.slow  # 1.5 s: twelve cells simulated over a fit
def test_calibrate_from_a_run_fits_on_some_cells_and_scores_the_others(tmp_path):
    """`calibrate --from RUN` on a run whose measured times are the simulator's own at a
    compute scale of 3 and 2 ms of fixed overhead an iteration: fitted on half the
    cells, it
    gives those values back and the other half's error falls from the default's to ~0;
    with a run of no measured cells it says so in one line."""
    import json

    from typer.testing import CliRunner

    import gcbench
    from gcbench.backends.simulate import simulate_cell
    from gcbench.cli import app
    from gcbench.config import expand, load_suite
    from gcbench.config.models import Network
    from gcbench.results.schema import record
    from gcbench.results.store import RunStore

    from conftest import write

    suite_file = write(tmp_path, "m.yaml", (
        "name: m\nmode: measure\ndevice: cpu\ngrid:\n  model: [tiny-mlp, tiny-cnn]\n"
        "  strategy: [fp32, fp16, allgather]\n  compressor: [dgc-1pct]\n"
        "  network: {intra: pcie, inter_gbps: 10}\n"
        "  cluster: [{machines: 2, gpus_per_machine: 2}, {machines: 4, gpus_per_machine: 1}]\n"))
    store = RunStore(tmp_path / "r" / "m" / "run1")
    store.write_manifest({"status": "finished", "suite_file": str(suite_file)})
    truth = {"compute_scale": 3.0, "iteration_overhead_us": 2000.0}
    for c in expand(load_suite(suite_file)):
        net = Network.model_validate({**c.network.model_dump(exclude_none=True), **truth})
        m = simulate_cell(c.model_copy(update={"mode": "simulate", "network": net})).metrics
        row = record(suite="m", cell_id=c.id, config=c.flat(), metrics=m, error=None,
                     repetition=0, gcbench_version=gcbench.__version__, run_id="run1", meta={})
        store.write_cell(c.id, [row], None)
    out = tmp_path / "fitted.yaml"
    r = CliRunner().invoke(app, ["calibrate", "--from", str(store.path), "--out", str(out),
                                 "--fit", "compute_scale,iteration_overhead_us", "--json"])
    assert r.exit_code == 0, r.output
    fit = json.loads(r.stdout)["fit"]
    assert fit["parameters"]["compute_scale"] == pytest.approx(3.0, rel=1e-2)  # descent: 1e-2
    assert fit["parameters"]["iteration_overhead_us"] == pytest.approx(2000.0, rel=1e-2)
    assert fit["out_of_sample"]["default"] > 0.3 and fit["out_of_sample"]["fitted"] < 1e-3
    assert out.is_file() and fit["fitted_on"] == fit["scored_on"] == 6
    empty = RunStore(tmp_path / "r" / "m" / "run2")
    empty.write_manifest({"status": "finished", "suite_file": str(suite_file)})
    r = CliRunner().invoke(app, ["calibrate", "--from", str(empty.path)])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "no measured cells" in r.stderr
    r = CliRunner().invoke(app, ["calibrate", "--from", str(tmp_path / "nowhere")])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1 and "--from" in r.stderr


@pytest.mark.slow
def test_amp_runs_under_autocast_and_the_hooks_see_fp32_buckets(ray_local):
    """A cell at precision amp-fp16 trains under torch's autocast with a GradScaler: the
    forward runs in fp16, the weights and the buckets DDP hands the hook stay fp32, so
    the DGC hook runs as at fp32 and the ranks stay in step."""
    from gcbench.cluster.measure import measured

    c = cell("allgather", "dgc-1pct", machines=1, gpus=2)
    amp = Cell.model_validate({**c.model_dump(),
                               "model": {"name": "tiny-mlp", "precision": "amp-fp16"}})  # fmt: skip
    rows = measured(amp, repetitions=1)
    assert rows[0]["iteration_s"] > 0 and rows[0]["wire_bytes"] > 0


@pytest.mark.gpu
def test_every_hook_runs_on_cuda_tensors(tmp_path):
    """Where a CUDA device is visible: one rank over NCCL, each hook on a model on the
    GPU (torch's own for none, fp16, bf16 and PowerSGD; gcbench's executor for the rest)
    gives finite weights after two steps."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible (torch.cuda.is_available() is False)")
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import gcbench.hooks

    dist.init_process_group("nccl", init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1)  # fmt: skip
    try:
        for kind in gcbench.hooks.hooks():
            spec = {"threshold": "threshold:threshold=0.01"}.get(kind, kind)
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                        torch.nn.Linear(64, 8)).cuda()  # fmt: skip
            ddp = DDP(model, device_ids=[0])
            ddp.register_comm_hook(*gcbench.hooks.hook(spec))
            opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
            for _ in range(2):
                opt.zero_grad()
                ddp(torch.randn(16, 64, device="cuda")).square().mean().backward()
                opt.step()
            assert all(torch.isfinite(p).all() for p in model.parameters()), kind
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_an_actor_killed_mid_cell_retries_the_cell_on_fresh_actors(ray_local):
    """SIGKILL one measuring actor's process (this test's Ray only, by PID) while the cell
    runs: the attempt fails as soon as its death is known, the cell runs again on fresh
    actors and its rows say it took 2 attempts; no actor or placement group outlives it."""
    import time

    from ray._private import state
    from ray.util import placement_group_table

    from gcbench.cluster.measure import measured

    from conftest import kill_own_actor_while

    before = {a for a, info in state.actors().items() if info["State"] == "ALIVE"}
    c = cell("allgather", "efsignsgd", model="tiny-cnn")
    # 40 repetitions: long enough to be seen running
    killed, box = kill_own_actor_while(lambda: measured(c, repetitions=40), "Measurer.run")
    assert killed, "no measuring actor was seen running"
    assert "error" not in box, box.get("error")
    rows = box["value"]
    assert all(r["attempts"] == 2 and r["startup_s"] > 0 for r in rows)  # type: ignore[attr-defined]
    assert "x CPU actor" in rows[0]["hardware"]  # type: ignore[index]
    for _ in range(50):  # `ray.kill` is asynchronous: the GCS says DEAD a moment later
        alive = {a for a, info in state.actors().items()
                 if info["State"] != "DEAD" and a not in before}  # fmt: skip
        if not alive:
            break
        time.sleep(0.2)
    assert not alive
    assert all(pg["state"] == "REMOVED" for pg in placement_group_table().values())


@pytest.mark.gpu
def test_a_one_actor_nccl_measure_is_within_15pct_of_the_profile(ray_local):
    """Issue #32, where a CUDA device is visible: resnet50 at batch 32, one actor over
    NCCL (torch's allreduce hook on one rank: no communication), against `gcbench
    profile --torch-device cuda` of the same model on the same device (forward, backward
    and update of one process, no DDP): within 15%."""
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device visible (torch.cuda.is_available() is False)")
    from gcbench.cluster.measure import measured
    from gcbench.compress.costs import device_key
    from gcbench.zoo.measure import measure_profile

    device = device_key("cuda") or "h100"
    c = Cell.model_validate({
        "model": {"name": "resnet50", "batch_size": 32}, "compressor": "none",
        "strategy": "fp32", "device": device, "network": {"inter_gbps": 100},
        "mode": "measure", "cluster": {"machines": 1, "gpus_per_machine": 1}})  # fmt: skip
    rows = measured(c, repetitions=10)
    got = sorted(r["iteration_s"] for r in rows)[len(rows) // 2]
    p = measure_profile("resnet50", 32, None, "cuda", warmup=3, iterations=10)
    want = p.forward_s + sum(t.backward_s for t in p.tensors) + p.update_s
    assert got == pytest.approx(want, rel=0.15)
    # the parts by CUDA events: each the profile's own within 25%
    for part, mine in (("forward_s", p.forward_s), ("update_s", p.update_s),
                       ("backward_s", sum(t.backward_s for t in p.tensors))):
        assert sorted(r[part] for r in rows)[len(rows) // 2] == pytest.approx(mine, rel=0.25)


def test_placement_counts_the_nodes_that_can_hold_workers_and_waits_as_told(monkeypatch):
    """STRICT_SPREAD needs a node per machine: a head with `CPU: 0` holds no workers and
    does not count, nor do the summation servers' nodes for GPU workers; the wait for a
    placement is `GCBENCH_PLACEMENT_TIMEOUT_S` (a `ray up` cluster boots GPU nodes on
    demand)."""
    from gcbench.cluster.emulate import PLACEMENT_S, placement_timeout_s, worker_nodes

    nodes = [{"Resources": {"CPU": 0.0}}, {"Resources": {"CPU": 36.0, "summation": 1.0}},
             {"Resources": {"CPU": 64.0, "GPU": 8.0}}, {"Resources": {"CPU": 64.0, "GPU": 8.0}}]
    assert worker_nodes(nodes, gpus=True) == 2 and worker_nodes(nodes, gpus=False) == 3
    assert worker_nodes(nodes[:1], gpus=False) == 0 and worker_nodes(nodes[:2], gpus=True) == 0
    monkeypatch.delenv("GCBENCH_PLACEMENT_TIMEOUT_S", raising=False)
    assert placement_timeout_s() == PLACEMENT_S
    monkeypatch.setenv("GCBENCH_PLACEMENT_TIMEOUT_S", "900")
    assert placement_timeout_s() == 900.0
    for bad in ("soon", "0"):
        monkeypatch.setenv("GCBENCH_PLACEMENT_TIMEOUT_S", bad)
        with pytest.raises(ConfigError, match="GCBENCH_PLACEMENT_TIMEOUT_S"):
            placement_timeout_s()


def test_a_gpu_cell_on_a_cluster_without_gpus_is_refused_up_front(monkeypatch):
    """A measure cell whose device is a GPU on a Ray cluster with none is refused before
    anything runs, saying what to do (device: cpu, or let an autoscaler boot GPU nodes);
    with a placement wait set it is left to wait for them."""
    from gcbench.cluster.measure import refuse_placement

    c = Cell.model_validate({**cell().model_dump(), "device": "v100"})
    nodes = [{"Resources": {"CPU": 2.0, "memory": 16e9}}]
    monkeypatch.delenv("GCBENCH_PLACEMENT_TIMEOUT_S", raising=False)
    with pytest.raises(ConfigError, match="device v100 puts each rank on a GPU"):
        refuse_placement(c, nodes)
    refuse_placement(cell(), nodes)  # device cpu: CPU actors
    monkeypatch.setenv("GCBENCH_PLACEMENT_TIMEOUT_S", "900")
    refuse_placement(c, nodes)


@pytest.mark.slow
def test_simulate_mode_measure_prints_the_measurement_beside_the_prediction(ray_local):
    """`gcbench simulate --mode measure`: what it ran on, the iteration against the
    simulator's, and the hook's split (gcbench's DGC hook runs synchronously)."""
    from typer.testing import CliRunner

    from gcbench.cli import app

    r = CliRunner().invoke(app, ["simulate", "--mode", "measure", "--model", "tiny-mlp",
                                 "--device", "cpu", "--machines", "1", "--gpus-per-machine",
                                 "2", "--strategy", "allgather", "--compressor", "dgc-1pct",
                                 "--inter-gbps", "10"])  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "measured on 2 x CPU actor" in r.stdout and "predicted by simulate" in r.stdout
    assert "exposed communication and compression (inside the hook)" in r.stdout
