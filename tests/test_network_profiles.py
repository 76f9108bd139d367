"""Network profiles (issue #12): shipped presets with their sources, files named by
suites and by `gcbench simulate --network`, per-collective overrides and compute scale."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gcbench.backends.simulate import simulate_cell
from gcbench.cli import app
from gcbench.config import Cell, expand, load_suite
from gcbench.config.models import Network
from gcbench.config.network_profile import preset_names, read_network_profile
from gcbench.errors import ConfigError

from conftest import write


def cell(network: dict, strategy: str = "fp32", compressor: str = "none", **extra) -> Cell:
    return Cell.model_validate({
        "model": "resnet50", "network": network, "cluster": {"machines": 4},
        "strategy": strategy, "compressor": compressor, **extra,
    })  # fmt: skip


def iteration(c: Cell) -> float:
    return simulate_cell(c).metrics["iteration_s"]


def test_every_preset_loads_and_says_where_its_numbers_come_from():
    assert {"default", "ideal", "bytecomp-nvlink-100g", "bytecomp-pcie-25g", "covap-30g"} <= set(
        preset_names()
    )
    for name in preset_names():
        profile, named, digest = read_network_profile(name)
        assert named == name and len(digest) == 64 and len(profile.source) > 40


def test_the_default_preset_is_what_a_cell_gets_without_a_profile():
    """The documented default and the built-in one are the same numbers."""
    profile, _, _ = read_network_profile("default")
    defaults = Network.model_validate({"inter_gbps": 10})
    for key, value in profile.network.items():
        assert getattr(defaults, key) == value, key
    assert iteration(cell({"profile": "default", "inter_gbps": 10})) == iteration(
        cell({"inter_gbps": 10})
    )


def test_a_profile_fills_the_network_and_fields_beside_it_win():
    c = cell({"profile": "bytecomp-pcie-25g"})
    assert (c.network.intra, c.network.inter_gbps, c.network.intra_gbs) == ("pcie", 25.0, 15.75)
    plain = cell({"intra": "pcie", "intra_gbs": 15.75, "inter_gbps": 25})
    assert iteration(c) == iteration(plain)
    assert c.id != plain.id  # the profile (and its content) is part of the id
    assert cell({"profile": "bytecomp-pcie-25g", "inter_gbps": 10}).network.inter_gbps == 10


def test_a_suite_names_a_profile_file_beside_it_and_results_follow_its_content(tmp_path):
    write(tmp_path, "net.yaml", "name: lab\nsource: our iperf runs\nnetwork:\n"
          "  inter_gbps: 40\n  inter_efficiency: 0.5\n")  # fmt: skip
    suite_text = (
        "name: s\ngrid:\n  model: [resnet50]\n  strategy: [fp32]\n"
        "  network: [{profile: net.yaml}]\n  cluster: [{machines: 2}]\n"
    )
    suite = load_suite(write(tmp_path, "s.yaml", suite_text))
    (c,) = expand(suite)
    assert c.network.profile == str(tmp_path / "net.yaml")
    assert (c.network.inter_gbps, c.network.inter_efficiency) == (40, 0.5)
    write(tmp_path, "net.yaml", "name: lab\nsource: our iperf runs\nnetwork:\n"
          "  inter_gbps: 40\n  inter_efficiency: 0.6\n")  # fmt: skip
    (again,) = expand(load_suite(tmp_path / "s.yaml"))
    assert again.id != c.id and again.network.inter_efficiency == 0.6


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: x\nsource: y\nnetwork: {inter_gbs: 4}\n",
         "net.yaml:3: network.inter_gbs: unknown key 'inter_gbs'; did you mean 'inter_gbps'?"),
        ("name: x\nnetwork: {}\n", "net.yaml:1: source: required key is missing"),
        ("name: x\nsource: y\noverrides: {allreduse: {}}\n", "unknown collective(s) allreduse"),
        ("name: x\nsource: y\ncompute_scale: 0\n", "net.yaml:3: compute_scale: must be > 0, got 0"),
        ("name: x\nsource: y\nnetwork: [\n", "net.yaml:4: invalid YAML"),
        # a key given twice (issue #35 item 3: the last won silently; suites refuse it)
        ("name: x\nsource: y\nnetwork: {inter_gbps: 4, inter_gbps: 40}\n",
         "net.yaml:3: network.inter_gbps: key given twice (first on line 3)"),
        ("name: x\nsource: y\nname: z\n", "net.yaml:3: name: key given twice (first on line 1)"),
        ("name: !!python/object:os.system x\n", "unsupported YAML tag"),
        ("- a list\n", "a network profile is a mapping"),
        # each mistake at its line, in the suites' words (a review, 2026-11-29: no line)
        ("name: x\nsource: y\nnetwork: {inter_efficiency: 7}\n",
         "net.yaml:3: network.inter_efficiency: must be ≤ 1, got 7"),
        ("name: x\nsource: y\nnetwork:\n  intra: infiniband\n", "net.yaml:4: network.intra: "),
    ],
)
def test_a_bad_profile_is_one_line_naming_the_file(tmp_path, text, message):
    write(tmp_path, "net.yaml", text)
    suite = write(tmp_path, "s.yaml", "name: s\ngrid:\n  model: [resnet50]\n  strategy: [fp32]\n"
                  "  network: [{profile: net.yaml}]\n  cluster: [{machines: 2}]\n")  # fmt: skip
    with pytest.raises(ConfigError) as e:
        load_suite(suite)
    (line,) = e.value.messages
    assert "net.yaml" in line and message in line, line


def test_an_override_changes_its_collective_only():
    """fp32 allreduces every bucket across machines: an allreduce override of the
    efficiency is the same as that efficiency on the whole link; an allgather override
    changes nothing there."""
    base = {"inter_gbps": 10}
    slow = cell({**base, "overrides": {"allreduce": {"inter_efficiency": 0.35}}})
    assert iteration(slow) == iteration(cell({**base, "inter_efficiency": 0.35}))
    assert iteration(slow) > iteration(cell(base))
    other = cell({**base, "overrides": {"allgather": {"inter_efficiency": 0.35}}})
    assert iteration(other) == iteration(cell(base))
    # and allgather of compressed payloads does feel it
    ag = {"strategy": "allgather", "compressor": "dgc-1pct"}
    assert iteration(cell({**base, "overrides": {"allgather_payload": {"inter_latency_us": 500}}},
                          **ag)) > iteration(cell(base, **ag))  # fmt: skip


def test_compute_scale_multiplies_the_compute_time():
    """The model's compute doubles; DDP's copies into the buckets (memory-bound, costed
    from the device's bandwidth) do not."""
    from gcbench.backends.simulate import cell_profile

    one, two = cell({"inter_gbps": 10}), cell({"inter_gbps": 10, "compute_scale": 2})
    alone = cell_profile(one).one_gpu_s
    assert cell_profile(two).one_gpu_s == pytest.approx(2 * alone, rel=1e-12)
    a, b = simulate_cell(one).metrics, simulate_cell(two).metrics
    assert b["compute_s"] - a["compute_s"] == pytest.approx(alone, rel=1e-9)


def test_simulate_takes_a_network_profile_and_flags_override_it(tmp_path):
    r = CliRunner().invoke(app, ["simulate", "--model", "resnet50", "--machines", "2",
                                 "--network", "bytecomp-pcie-25g", "--json"])  # fmt: skip
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)["cell"]
    assert (got["network_profile"], got["intra"], got["inter_gbps"]) == (
        "bytecomp-pcie-25g", "pcie", 25.0,
    )  # fmt: skip
    r = CliRunner().invoke(app, ["simulate", "--model", "resnet50", "--machines", "2",
                                 "--network", "bytecomp-pcie-25g", "--inter-gbps", "5",
                                 "--json"])  # fmt: skip
    assert json.loads(r.stdout)["cell"]["inter_gbps"] == 5.0
    r = CliRunner().invoke(app, ["simulate", "--model", "resnet50", "--machines", "2",
                                 "--network", "bytecomp-pcie-25g"])  # fmt: skip
    assert r.exit_code == 0, r.output  # (the text output once read the flags left out)
    assert "2x8 pcie · 25 Gbps · v100 · network bytecomp-pcie-25g" in r.stdout
    r = CliRunner().invoke(app, ["simulate", "--model", "resnet50", "--network", "nope"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1
    assert r.stderr.startswith("error: --network: network profile 'nope': no preset")
    # a mistake inside the profile names the flag that gave it (issue #35: it blamed
    # --intra-latency-us, the first network flag its message happened to name)
    bad = write(tmp_path, "bad.yaml", "name: x\nsource: y\nnetwork: {inter_gbs: 4}\n")
    r = CliRunner().invoke(app, ["simulate", "--model", "resnet50", "--network", str(bad)])
    assert r.exit_code == 2 and r.stderr.startswith(f"error: --network: {bad}:3: network.")
    r = CliRunner().invoke(app, ["simulate", "--model", "resnet50", "--machines", "2"])
    assert r.exit_code == 2 and r.stderr == (
        "error: --inter-gbps: required across machines (or --network with a profile that "
        "gives it)\n"
    )
    # one machine has no link between machines: nothing to ask for
    r = CliRunner().invoke(app, ["simulate", "--model", "resnet50"])
    assert r.exit_code == 0 and "1x8 nvlink · v100" in r.stdout and "Gbps" not in r.stdout
    r = CliRunner().invoke(app, ["networks", "--json"])
    assert {p["name"] for p in json.loads(r.stdout)} == set(preset_names())


def test_networks_is_a_table_with_each_sources_first_sentence_and_all_of_it_on_asking():
    table = CliRunner().invoke(app, ["networks"]).stdout.splitlines()
    assert table[0].split() == ["preset", "inside", "a", "machine", "across", "machines",
                                "collectives"]  # fmt: skip
    rows = {line.split()[0]: line for line in table[1:] if line and not line[0].isspace()}
    assert set(preset_names()) <= set(rows)
    # the defaults filled where a preset sets none; the fitted values rounded
    assert rows["default"].split()[1:] == ["nvlink", "(device),", "5", "us,", "0.8", "-",
                                           "ring"]  # fmt: skip
    p3dn = rows["aws-p3dn-tcp"]
    assert "100 Gb/s, 454 us, 0.39" in p3dn and p3dn.endswith("nccl")
    first = table[table.index(p3dn) + 1].strip()
    assert first.startswith("100 Gb/s Ethernet") and first.endswith("a machine.")
    full = CliRunner().invoke(app, ["networks", "--sources"]).stdout
    assert "inter_latency_us=453.801" in full and "Held out: the same author's 4-machine" in full


def test_changing_the_machine_kind_drops_the_profiles_link_rate():
    """(Found in review: `{profile: bytecomp-pcie-25g, intra: nvlink}` kept PCIe's 15.75
    GB/s for NVLink.)"""
    c = cell({"profile": "bytecomp-pcie-25g", "intra": "nvlink"})
    assert (c.network.intra, c.network.intra_gbs) == ("nvlink", 150.0)
    assert cell({"profile": "bytecomp-pcie-25g", "intra": "nvlink", "intra_gbs": 100}
                ).network.intra_gbs == 100  # fmt: skip


def test_nvlink_runs_at_the_devices_rate_unless_given():
    """Issue #31: a cell's NVLink moves at its device's rate (the device table's
    `nvlink_gbs`), stated in the cell so its id follows it; a rate given, a PCIe machine
    and a V100 (whose rate was the old default: its cells keep their ids) are as before."""
    from gcbench.config.models import Cell

    def make(network, device):
        return Cell.model_validate({"model": "tiny-mlp", "network": network, "device": device,
                                    "cluster": {"machines": 2}, "strategy": "fp32",
                                    "compressor": "none"})  # fmt: skip

    assert make({"inter_gbps": 10}, "h100").network.intra_gbs == 450.0
    assert make({"inter_gbps": 10}, "a100").network.intra_gbs == 300.0
    assert make({"profile": "default", "inter_gbps": 10}, "h100").network.intra_gbs == 450.0
    assert make({"inter_gbps": 10, "intra_gbs": 200}, "h100").network.intra_gbs == 200.0
    assert make({"inter_gbps": 10, "intra": "pcie"}, "h100").network.intra_gbs == 15.75
    # a GPU without NVLink on an NVLink machine: the old default
    assert make({"inter_gbps": 10}, "t4").network.intra_gbs == 150.0
    v100 = make({"inter_gbps": 10}, "v100")
    assert '"intra_gbs":150.0' in v100.canonical_json()
    # the faster links are what the simulator runs
    slow, fast = (iteration(make({"inter_gbps": 100, "intra_gbs": r}, "h100"))
                  for r in (150, None))  # fmt: skip
    assert fast <= slow


@pytest.mark.parametrize(
    ("preset", "device", "machines", "busbw_gbs"),
    [
        ("dgx-h100-ndr", "h100", 1, 370.0),  # its source (NVIDIA/nccl-tests#212)
        ("dgx-a100-hdr", "a100", 1, 232.5),  # its source (NVIDIA/nccl-tests#175)
        ("dgx-h100-ndr", "h100", 4, 365.84),  # held out: 4 HGX H100 nodes (#309)
    ],
)
def test_the_dgx_presets_give_published_bus_bandwidths(preset, device, machines, busbw_gbs):
    """An 8 GiB allreduce (nccl-tests' usual largest size, where its maximum busBw is
    reached) over every GPU, timed by gcbench's collective model on the preset, runs at
    the bus bandwidth nccl-tests reports (busBw = size / time x 2(n-1)/n) within 5%: on
    one machine the figure each preset was built from (its efficiency is the fraction of
    the NVLink line rate the model's ring achieves, not of anything else); on four H100
    machines a figure it was not built from, through the NICs. The presets cost
    collectives as NCCL does (`collectives: nccl`): there 365.6 GB/s at 8 GiB, 362.2 at 4
    GiB (-1.0%); as a ring of 62 steps at the network's latency 356.7 and 345.3 (-5.6%)."""
    from gcbench.backends.simulate import costs_for
    from gcbench.config import Cell
    from gcbench.sim.iteration import SimContext

    cell = Cell.model_validate(
        {"model": "resnet50", "device": device, "compressor": "none", "strategy": "fp32",
         "network": {"profile": preset},
         "cluster": {"machines": machines, "gpus_per_machine": 8}}
    )  # fmt: skip
    size, n = 8 * 2**30, 8 * machines
    seconds, _ = SimContext(costs_for(cell), [1]).comm("flat", "allreduce", size, 8)
    assert size / seconds * 2 * (n - 1) / n / 1e9 == pytest.approx(busbw_gbs, rel=0.05)
