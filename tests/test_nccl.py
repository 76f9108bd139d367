"""NCCL's algorithms and protocols by message size (`gcbench.comm.nccl`): hand-computed
against NCCL's own tuning model (src/graph/tuning.cc, v2.23.4), its limits against the
ring model, and the simulator's wiring."""

from __future__ import annotations

import math
import random

import pytest

from gcbench.comm import Link, collective_s, nccl_collective_s, nvlink_machine
from gcbench.comm.nccl import fastest, names, pieces

US = 1e-6


def choice(collective, nbytes, ranks, machines, intra, inter=None, *, nvlink=True):
    """Which 'algorithm/protocol' NCCL's model picks for this call (the bus: the slower
    link the ring crosses)."""
    links = [intra] + ([inter] if inter is not None and machines > 1 else [])
    bus = min(links, key=lambda link: link.effective_Bps)
    got = pieces(collective, ranks, machines, intra, inter, bus, nvlink=nvlink)
    return fastest(got, names(collective, nvlink), nbytes)


def test_one_nvlink_machine_matches_nccls_own_model() -> None:
    """With the link's step latency set to NCCL's ring/Simple hwLat on NVLink (3.4 us),
    every pair's latency is NCCL's: baseLat + nsteps x hwLat. 8 GPUs, allreduce of 8 B:
    ring/LL 6.6 + 14 x 0.6 = 15.0 us, tree/LL 6.8 + 2 x 7 x 0.6 = 15.2 us, so ring/LL,
    plus 8 B at LL's half bus bandwidth, 2 x 7/8 x 8 B / (0.5 eta B)."""
    intra = Link(150e9, 3.4 * US, 0.8)
    got = nccl_collective_s("allreduce", 8.0, 8, 1, intra)
    assert got == pytest.approx(15.0 * US + 2 * 7 / 8 * 8 / (0.5 * 120e9), rel=1e-12)
    assert choice("allreduce", 8.0, 8, 1, intra) == "ring/LL"
    # allgather: ring only, 7 steps; LL128 on NVLink: 14.0 + 7 x 1.9 = 27.3 us
    got = pieces("allgather", 8, 1, intra, None, intra, nvlink=True)
    lat = {p: a for p, (a, _) in zip(("LL", "LL128", "Simple"), got, strict=True)}
    assert lat == pytest.approx({"LL": 6.6e-6 + 7 * 0.6e-6, "LL128": 14e-6 + 7 * 1.9e-6,
                                 "Simple": 8.4e-6 + 7 * 3.4e-6}, rel=1e-12)


def test_across_machines_the_tree_and_the_rings_network_steps() -> None:
    """8 machines x 8 GPUs, NVLink inside, network steps at NCCL's hwLat (14 us Simple).
    Ring/Simple: 8.4 + (126 - 16) x max(3.4, 3 x 1 overhead) + 16 x 14 us (NCCL's
    nInterSteps = 2 x nodes). Tree/LL: 6.8 + 2 (7 x 0.6 + 3 x 5.0) us."""
    intra, inter = Link(150e9, 3.4 * US, 0.8), Link(12.5e9, 14 * US, 0.7)
    names = ["ring/LL", "tree/LL", "ring/LL128", "tree/LL128", "ring/Simple", "tree/Simple"]
    got = dict(zip(names, pieces("allreduce", 64, 8, intra, inter, inter, nvlink=True),
                   strict=True))
    assert got["ring/Simple"][0] == pytest.approx((8.4 + 110 * 3.4 + 16 * 14) * US, rel=1e-12)
    assert got["tree/LL"][0] == pytest.approx((6.8 + 2 * (7 * 0.6 + 3 * 5.0)) * US, rel=1e-12)
    assert got["ring/Simple"][1] == pytest.approx(2 * 63 / 64 / (0.7 * 12.5e9), rel=1e-12)
    assert got["tree/Simple"][1] == pytest.approx(2 / (0.92 * 0.7 * 12.5e9), rel=1e-12)
    assert choice("allreduce", 1e3, 64, 8, intra, inter) == "tree/LL"
    assert choice("allreduce", 1e9, 64, 8, intra, inter) == "ring/Simple"


def test_large_messages_cost_the_ring_plus_a_base_latency() -> None:
    """Inside one machine Simple's ring is gcbench's ring (same steps, same bus bandwidth)
    plus NCCL's 8.4 us base latency, and for large messages it is what NCCL runs."""
    m = nvlink_machine(8)
    for collective in ("allreduce", "allgather", "reduce_scatter"):
        ring = collective_s(collective, 2e9, 8, m.intra)
        assert nccl_collective_s(collective, 2e9, 8, 1, m.intra) == pytest.approx(
            ring + 8.4 * US, rel=1e-12
        )
    # alltoall is send/receive, outside NCCL's tuning model: the ring's cost
    assert nccl_collective_s("alltoall", 1e4, 8, 1, m.intra) == collective_s(
        "alltoall", 1e4, 8, m.intra
    )


def test_small_messages_are_far_cheaper_than_the_ring_at_scale() -> None:
    """A 4 KiB allreduce over 128 machines: the ring pays 2 x 1023 steps of 25 us (51 ms);
    NCCL's tree 2 log2(128) network steps."""
    intra, inter = Link(150e9, 5 * US, 0.8), Link(12.5e9, 25 * US, 0.7)
    ring = collective_s("allreduce", 4096, 1024, inter)
    got = nccl_collective_s("allreduce", 4096, 1024, 128, intra, inter)
    assert ring > 50e-3 and got < 0.5e-3
    assert choice("allreduce", 4096, 1024, 128, intra, inter).startswith("tree/")


def test_cost_grows_with_the_size_and_never_beats_every_piece() -> None:
    """The planner's bounds need a phase's time to grow with its size: the lower envelope
    of increasing affine pieces does, for random links, sizes and cluster shapes."""
    rng = random.Random(7)
    for _ in range(300):
        machines = rng.choice([1, 2, 3, 8, 64])
        g = rng.choice([1, 2, 4, 8])
        ranks = machines * g
        if ranks < 2:
            continue
        intra = Link(rng.uniform(10, 500) * 1e9, rng.uniform(0, 20) * US, rng.uniform(0.1, 1))
        inter = Link(rng.uniform(1, 400) * 1e9, rng.uniform(0, 50) * US, rng.uniform(0.1, 1))
        name = rng.choice(["allreduce", "allgather", "reduce_scatter", "broadcast",
                           "allgather_payload", "gather", "reduce"])
        nvlink = rng.random() < 0.5
        sizes = sorted(10 ** rng.uniform(0, 10) for _ in range(20))
        times = [nccl_collective_s(name, s, ranks, machines, intra, inter, nvlink=nvlink)
                 for s in sizes]  # fmt: skip
        assert all(a <= b for a, b in zip(times, times[1:], strict=False))
        got = pieces(name, ranks, machines, intra, inter,
                     min([intra, inter][: 1 + (machines > 1)], key=lambda x: x.effective_Bps),
                     nvlink=nvlink)  # fmt: skip
        for s, t in zip(sizes, times, strict=True):
            assert t == pytest.approx(min(a + b * s for a, b in got), rel=1e-12)
        assert len(got) == (3 if nvlink else 2) * (2 if name == "allreduce" else 1)


def test_ll128_runs_only_in_nvlink_machines() -> None:
    link = Link(15.75e9, 5 * US, 0.8)
    assert not any("LL128" in choice("allreduce", s, 8, 1, link, nvlink=False)
                   for s in (10 ** e for e in range(1, 10)))  # fmt: skip
    assert any("LL128" in choice("allreduce", s, 8, 1, link, nvlink=True)
               for s in (2 ** e for e in range(10, 30)))  # fmt: skip


def test_the_simulator_costs_phases_as_nccl_does() -> None:
    """`Costs.collectives = "nccl"`: a flat allreduce phase of S bytes over 4 x 4 GPUs
    takes `nccl_collective_s`, and a hierarchical inter phase the tree/ring over one GPU a
    machine on its share of the NICs."""
    from gcbench.comm import ring_share_link
    from gcbench.sim.iteration import Costs, SimContext

    m = nvlink_machine(4)
    inter = Link(25e9, 20 * US, 0.9)
    x = SimContext(Costs(4, 4, m, inter, collectives="nccl"), [1000])
    ring = SimContext(Costs(4, 4, m, inter), [1000])
    for size in (1e2, 1e5, 1e8):
        want = nccl_collective_s("allreduce", size, 16, 4, m.intra, inter)
        assert x.comm("flat", "allreduce", size, 4)[0] == pytest.approx(want, rel=1e-12)
        share = ring_share_link(inter, 1, 4)
        want = nccl_collective_s("allreduce", size, 4, 4, m.intra, share, share)
        assert x.comm("inter", "allreduce", size, 4)[0] == pytest.approx(want, rel=1e-12)
        assert x.comm("flat", "allreduce", size, 4)[1] == ring.comm("flat", "allreduce", size, 4)[1]
    assert x.comm("flat", "allreduce", 1e2, 4)[0] < ring.comm("flat", "allreduce", 1e2, 4)[0] / 3
    assert math.isclose(x.comm("flat", "allreduce", 0.0, 4)[0], 0.0)


def test_published_sweeps_are_predicted_better_than_by_the_ring_out_of_sample() -> None:
    """Five published nccl-tests sweeps that NCCL tuned itself (benchmarks/data/nccl-tests,
    SOURCES.md), each fitted by `gcbench calibrate`'s fit on every other size under both
    models, scored on the sizes it did not see: NCCL's algorithms and protocols predict
    them better than the ring (median of the five medians 7.1% against 13.3%;
    `benchmarks/nccl_sweeps.py` has all 29)."""
    import statistics
    import sys

    from conftest import ROOT

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import yaml
    from nccl_sweeps import DATA, held_out, load

    sweeps = yaml.safe_load((DATA / "sweeps.yaml").read_text())
    names = ["aws_p5_1x8_h100_nvswitch_allreduce", "alcf_sophia_2x8_a100_ib_allreduce",
             "oci_bm_gpu4_2x8_a100_roce_allreduce", "snellius_2x4_h100_ndr200x4_allgather",
             "azure_ndmv4_2x8_a100_hdr_allreduce"]  # fmt: skip
    medians: dict[str, list[float]] = {"ring": [], "nccl": []}
    for name in names:
        ms, base, params = load(name, sweeps[name])
        odd, even = list(range(1, len(ms), 2)), list(range(0, len(ms), 2))
        for model in medians:
            errors = held_out(ms, {**base, "collectives": model}, params, even, odd)
            medians[model].append(statistics.median(abs(e) for e in errors))
    ring, nccl = statistics.median(medians["ring"]), statistics.median(medians["nccl"])
    assert nccl < 0.8 * ring and nccl < 0.10, (ring, nccl)


def test_a_cell_names_its_collective_model_and_the_record_keeps_it() -> None:
    """`network: {collectives: nccl}` reaches the simulator's costs and the cell's record,
    and makes a communication-bound cell's small buckets cheaper than the ring does."""
    from gcbench.backends.simulate import costs_for, simulate_cell
    from gcbench.config import Cell

    def cell(model: str) -> Cell:
        return Cell.model_validate({
            "model": "resnet50", "compressor": "none", "strategy": "fp32", "fusion": "tensor",
            "network": {"inter_gbps": 10, "collectives": model},
            "cluster": {"machines": 8, "gpus_per_machine": 4}})  # fmt: skip

    nccl, ring = cell("nccl"), cell("ring")
    assert costs_for(nccl).collectives == "nccl" and nccl.flat()["collectives"] == "nccl"
    assert nccl.id != ring.id
    # 161 per-tensor allreduces on 32 GPUs: each pays 62 latency steps as a ring
    fast, slow = simulate_cell(nccl), simulate_cell(ring)
    assert fast.metrics["iteration_s"] < slow.metrics["iteration_s"]
    # the trace says what NCCL would run: the smallest tensors as a tree with LL, the
    # largest as a ring with Simple
    runs = [s.name.rsplit(" ", 1)[1] for s in sorted(
        (s for s in fast.spans if s.kind == "comm"), key=lambda s: s.bytes)]  # fmt: skip
    assert runs[0] == "(tree/LL)" and runs[-1] == "(ring/Simple)"
    assert all(s.name.endswith("flat:ar") for s in slow.spans if s.kind == "comm")


@pytest.mark.parametrize(
    ("preset", "fitted", "held_out", "gpus", "machines", "bound"),
    [
        # NVIDIA's DGX H100 sample -> AWS p5's one-node sweep: 10.2% (default 5 us: 15.1%)
        ("dgx-h100-ndr", ("intra_latency_us",), "aws_p5_1x8_h100_nvswitch_allreduce", 8, 1,
         0.11),
        # ALCF Sophia (DGX A100, 8 HDR) -> Azure NDm A100 v4 (8 HDR): 7.9% (defaults: 11.1%)
        ("dgx-a100-hdr", ("inter_latency_us", "inter_efficiency"),
         "azure_ndmv4_2x8_a100_hdr_allreduce", 8, 2, 0.09),
        # Snellius' allreduce -> the same machines' allgather and reduce-scatter: 8.8% and
        # 9.6% (defaults: 23.3% and 25.3%)
        ("snellius-h100-ndr200", ("inter_latency_us", "inter_efficiency"),
         "snellius_2x4_h100_ndr200x4_allgather", 4, 2, 0.10),
        ("snellius-h100-ndr200", ("inter_latency_us", "inter_efficiency"),
         "snellius_2x4_h100_ndr200x4_reducescatter", 4, 2, 0.11),
        # AWS's p5 sweep -> another team's p5 sweep (NCCL 2.22.3): 21.4% (defaults: 51.8%)
        ("aws-p5-efa", ("inter_latency_us", "inter_efficiency"),
         "aws_p5_2x8_h100_efa_nccl2223_allreduce", 8, 2, 0.23),
        # 100 Gb/s TCP (p3dn) and EDR (ABCI V): two machines -> four: 13.0% and 18.3%
        # (defaults: 68.9% and 21.8%)
        ("aws-p3dn-tcp", ("inter_latency_us", "inter_efficiency"),
         "aws_p3dn_4x1_v100_tcp100_allreduce", 1, 4, 0.14),
        ("abci-v100-edr", ("inter_latency_us", "inter_efficiency"),
         "abci_4x4_v100_edr_allreduce", 4, 4, 0.20),
        # no second sweep of these fabrics: their fits reproduced only
        ("oci-a100-roce", ("inter_latency_us", "inter_efficiency"), None, 8, 2, None),
        ("aws-p4de-efa", ("inter_latency_us", "inter_efficiency"), None, 8, 2, None),
    ],
)  # fmt: skip
def test_the_fabric_presets_are_published_sweeps_fitted_and_predict_another(
    preset, fitted, held_out, gpus, machines, bound
):
    """Each fabric preset's latency (and efficiency) is what `gcbench calibrate` makes of
    one published sweep (docs/calibration/<preset>.points.yaml); where another published
    sweep of the same machines exists (another machine of the kind, or the same machines'
    other collectives), the preset predicts it, never fitted on it, within `bound` median
    |error| (1-2 points above what it gives; the defaults miss by 4 to 30 points more)."""
    import csv
    import statistics

    from gcbench.calibrate import Measurement, calibrate, predictor
    from gcbench.config.network_profile import read_network_profile

    from conftest import ROOT

    got = calibrate(ROOT / f"docs/calibration/{preset}.points.yaml", list(fitted))
    shipped, _, _ = read_network_profile(preset)
    for key in fitted:
        assert shipped.network[key] == pytest.approx(got.network[key], rel=1e-5), key
    if held_out is None:
        return
    level = "inter" if machines > 1 else "intra"
    collective = {"allreduce": "allreduce", "allgather": "allgather",
                  "reducescatter": "reduce_scatter"}[held_out.rsplit("_", 1)[1]]  # fmt: skip
    rows = csv.DictReader((ROOT / f"benchmarks/data/nccl-tests/{held_out}.csv").open())
    ms = [Measurement(r["size_bytes"], float(r["time_us"]) * 1e-6,
                      (collective, gpus * machines, float(r["size_bytes"]), level, machines))
          for r in rows if float(r["size_bytes"]) > 0]  # fmt: skip
    net = dict(shipped.network)
    errors = [abs(predictor(m, net)({}) / m.measured - 1) for m in ms]
    assert statistics.median(errors) <= bound


def test_per_protocol_bandwidths_scale_only_their_protocols_pieces() -> None:
    """`Protocols(ll_bandwidth, ll128_bandwidth)` divides LL's and LL128's time per byte
    by its factor; latencies and Simple's pieces stay NCCL's."""
    from gcbench.comm.nccl import Protocols

    intra, inter = Link(150e9, 3.4 * US, 0.8), Link(12.5e9, 20 * US, 0.9)
    plain = pieces("allreduce", 16, 2, intra, inter, inter, nvlink=True)
    got = pieces("allreduce", 16, 2, intra, inter, inter, nvlink=True,
                 protocols=Protocols(0.5, 2.0))  # fmt: skip
    for label, (a, b), (a0, b0) in zip(names("allreduce", True), got, plain, strict=True):
        factor = {"LL": 0.5, "LL128": 2.0, "Simple": 1.0}[label.split("/")[1]]
        assert a == a0 and b == pytest.approx(b0 / factor, rel=1e-12), label


def test_a_network_refuses_protocol_corrections_without_nccls_model() -> None:
    from pydantic import ValidationError

    from gcbench.config.models import Network

    with pytest.raises(ValidationError, match="nccl_ll_bandwidth\n.*corrects NCCL's protocols: "
                       "it needs collectives: nccl"):  # fmt: skip
        Network.model_validate({"inter_gbps": 25, "nccl_ll_bandwidth": 0.5})
    n = Network.model_validate({"inter_gbps": 25, "collectives": "nccl",
                                "nccl_ll128_bandwidth": 1.3})  # fmt: skip
    assert tuple(n.protocols()) == (1.0, 1.3)


def test_a_fitted_profiles_protocol_corrections_leave_with_its_nccl_model(tmp_path):
    """A profile `calibrate` wrote with NCCL's corrections, named with `collectives: ring`
    (to compare the two models on one's own fit): the corrections do not apply and are
    not kept; in the profile itself without `collectives: nccl` they are a mistake at
    their line."""
    from gcbench.config.models import Network
    from gcbench.config.network_profile import parse_network_profile

    fitted = tmp_path / "fit.yaml"
    fitted.write_text("name: f\nsource: s\nnetwork:\n  inter_gbps: 100\n  collectives: nccl\n"
                      "  nccl_ll_bandwidth: 0.5\n")  # fmt: skip
    ring = Network.model_validate({"profile": str(fitted), "collectives": "ring"})
    assert ring.nccl_ll_bandwidth == 1.0 and ring.collectives == "ring"
    assert Network.model_validate({"profile": str(fitted)}).nccl_ll_bandwidth == 0.5
    raw = fitted.read_bytes().replace(b"  collectives: nccl\n", b"")
    with pytest.raises(ValueError) as info:
        parse_network_profile(raw, "p.yaml")
    assert str(info.value) == ("p.yaml:5: network.nccl_ll_bandwidth: corrects NCCL's "
                               "protocols: it needs collectives: nccl")  # fmt: skip


def test_per_protocol_bandwidths_fitted_on_half_a_sweep_predict_its_other_half() -> None:
    """AWS p5's published two-machine sweep (NCCL tuned itself), fitted by `gcbench
    calibrate`'s fit on every other size with and without LL's and LL128's bandwidths,
    scored on the sizes it did not see (both ways round): the per-protocol fit predicts
    them better (4.4% median |error| against 14.1%; over all 19 tuned sweeps 5.8% against
    11.3%, `benchmarks/nccl_sweeps.py`). Across sweeps they transfer worse in 4 of 7
    (docs/calibration.md), so the presets keep two parameters."""
    import statistics
    import sys

    from conftest import ROOT

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import yaml
    from nccl_sweeps import DATA, held_out, load, protocol_params

    name = "aws_p5_2x8_h100_efa3200_allreduce"
    spec = yaml.safe_load((DATA / "sweeps.yaml").read_text())[name]
    ms, base, params = load(name, spec)
    net = {**base, "collectives": "nccl"}
    odd, even = list(range(1, len(ms), 2)), list(range(0, len(ms), 2))
    got = {}
    for label, mine in (("two", params), ("four", params + protocol_params(spec))):
        errors = held_out(ms, net, mine, even, odd) + held_out(ms, net, mine, odd, even)
        got[label] = statistics.median(abs(e) for e in errors)
    assert got["four"] < 0.7 * got["two"] and got["four"] < 0.10, got


def test_calibrate_says_why_a_protocol_correction_cannot_be_fitted() -> None:
    from gcbench.calibrate import Measurement, fit
    from gcbench.errors import ConfigError

    ms = [Measurement(f"{s}", 1e-4 + s / 1e10, ("allreduce", 16, float(s), "inter", 2))
          for s in (1e3, 1e5, 1e7)]  # fmt: skip
    ring = {"intra": "nvlink", "inter_gbps": 100}
    with pytest.raises(ConfigError, match="--fit: nccl_ll_bandwidth corrects NCCL's "
                       "protocols: it needs collectives: nccl"):  # fmt: skip
        fit(ms, ring, ["inter_latency_us", "nccl_ll_bandwidth"])
    pcie = {"intra": "pcie", "inter_gbps": 100, "collectives": "nccl"}
    with pytest.raises(ConfigError, match="nccl_ll128_bandwidth moves no point's prediction "
                       r"\(LL128 runs on NVLink machines only\)"):  # fmt: skip
        fit(ms, pcie, ["inter_latency_us", "nccl_ll128_bandwidth"])


def test_a_cells_protocol_corrections_reach_the_simulator_and_its_record() -> None:
    """A slower LL (a twentieth of NCCL's bandwidth) makes the small per-tensor allreduces
    that NCCL runs with LL dearer; the record keeps the factor."""
    from gcbench.backends.simulate import costs_for, simulate_cell
    from gcbench.config import Cell

    def cell(ll: float) -> Cell:
        return Cell.model_validate({
            "model": "resnet50", "compressor": "none", "strategy": "fp32", "fusion": "tensor",
            "network": {"inter_gbps": 10, "collectives": "nccl", "nccl_ll_bandwidth": ll},
            "cluster": {"machines": 8, "gpus_per_machine": 4}})  # fmt: skip

    slow, plain = cell(0.05), cell(1.0)
    assert costs_for(slow).nccl_protocols == (0.05, 1.0)
    assert slow.flat()["nccl_ll_bandwidth"] == 0.05 and slow.id != plain.id
    a, b = simulate_cell(slow).metrics, simulate_cell(plain).metrics
    assert a["comm_total_s"] > b["comm_total_s"]
