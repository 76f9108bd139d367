"""Suite loading: every mistake reported with file:line, unsafe YAML refused fast."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from pydantic import ValidationError

from gcbench.compress.specs import KINDS, PRESETS, TopkSpec
from gcbench.config import expand, load_suite, suite_schema
from gcbench.config.models import Cluster
from gcbench.errors import ConfigError

from conftest import ROOT, SHARED, TINY_SUITE, write

ESPRESSO = SHARED / "data" / "espresso-v100-profiles.json"

MISTAKES = """\
name: bad
mode: simulate
colour: blue
grid:
  model: [resnet50]
  compressor:
    - none
    - zipit
  network:
    - {inter_gbps: -10}
  cluster:
    - machines: 0
  strategy: fp32
repetitions: two
"""


@pytest.mark.parametrize(
    "line,message",
    [
        ("seed: true", "seed: must be a whole number, got True"),
        ('repetitions: "2"', "repetitions: must be a whole number, got '2'"),
    ],
)
def test_yaml_booleans_and_strings_are_not_counts(tmp_path, line, message):
    """pydantic's lax mode read `true` as 1 and `"2"` as 2; a suite says what it means."""
    text = (
        "name: x\ngrid:\n  model: tiny-mlp\n  strategy: fp32\n  network: {inter_gbps: 10}\n"
        "  cluster: {machines: 2}\n" + line + "\n"
    )
    path = write(tmp_path, "bad.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    assert info.value.messages == [f"{path}:7: {message}"]
    cluster = {"machines": "2"}
    with pytest.raises(ValidationError, match="must be a whole number, got '2'"):
        Cluster.model_validate(cluster)


def test_every_mistake_on_its_own_line(tmp_path):
    path = write(tmp_path, "bad.yaml", MISTAKES)
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    lines = info.value.messages
    assert lines == sorted(lines, key=lambda m: int(m.split(":")[1]))
    expect = {
        3: "colour: unknown key 'colour'",
        8: "grid.compressor.1: unknown compressor 'zipit'",
        10: "grid.network.0.inter_gbps: must be > 0, got -10",
        12: "grid.cluster.0.machines: must be ≥ 1, got 0",
        14: "repetitions: must be a whole number, got 'two'",
    }
    assert len(lines) == len(expect)
    for line, (number, text) in zip(lines, expect.items(), strict=True):
        assert line.startswith(f"{path}:{number}: {text}"), line


def test_a_key_in_the_wrong_section_says_where_it_belongs(tmp_path):
    """A real key out of place is not 'did you mean' itself: the line names its section;
    a near miss names the key and, when it lives elsewhere, that section."""
    text = ("name: x\nmodels: [resnet50]\nnetwork: {inter_gbps: 10}\ngrid:\n  model: resnet50\n"
            "  network: {inter_gbps: 10, colectives: nccl, machines: 2}\n"
            "  cluster: {machines: 2}\n")  # fmt: skip
    path = write(tmp_path, "bad.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    assert info.value.messages == [
        f"{path}:2: models: unknown key 'models'; did you mean 'model' (under 'grid')?",
        f"{path}:3: network: unknown key 'network' here; it belongs under 'grid' or 'project'",
        f"{path}:6: grid.network.colectives: unknown key 'colectives'; did you mean "
        "'collectives'?",
        f"{path}:6: grid.network.machines: unknown key 'machines' here; it belongs under "
        "'cluster' or 'project'",
    ]


def test_nested_compressor_parameter_line(tmp_path):
    text = MISTAKES.replace("    - zipit\n", "    - {kind: topk, ratio: 3}\n")
    with pytest.raises(ConfigError) as info:
        load_suite(write(tmp_path, "bad.yaml", text))
    assert (
        f"{tmp_path / 'bad.yaml'}:8: grid.compressor.1.ratio: must be ≤ 1, got 3"
        in info.value.messages
    )


def test_missing_key_points_at_its_mapping(tmp_path):
    text = "name: x\ngrid:\n  model: resnet50\n  cluster: {machines: 1}\n"
    with pytest.raises(ConfigError) as info:
        load_suite(write(tmp_path, "m.yaml", text))
    assert info.value.messages == [
        f"{tmp_path / 'm.yaml'}:2: grid.network: required key is missing"
    ]


BAD_FILES = {
    "broken.yaml": ("name: x\ngrid: {model: [resnet50\n", ":3: invalid YAML"),
    "empty.yaml": ("", ":1: the file is empty"),
    "latin1.yaml": ("name: caf\xe9\n".encode("latin-1"), ":1: not UTF-8 text"),
    "pyobj.yaml": (
        "name: !!python/object/apply:os.system ['echo hi']\n",
        ":1: unsupported YAML tag",
    ),
    "custom.yaml": ("name: !mine x\n", ":1: unsupported YAML tag"),
    "bomb.yaml": (
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)},"
            f" *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)},"
            f" *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
            for i in range(8)
        ),
        "alias bomb",
    ),
    "list.yaml": ("- 1\n- 2\n", ":1: expected a mapping"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_files_give_one_clear_line_fast(tmp_path, name):
    content, expected = BAD_FILES[name]
    path = write(tmp_path, name, content)
    start = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    elapsed = time.perf_counter() - start
    assert len(info.value.messages) == 1
    assert info.value.messages[0].startswith(str(path))
    assert expected in info.value.messages[0]
    assert "\n" not in info.value.messages[0]
    # A safety bound, not a benchmark: an alias bomb must not be expanded (expanded, it
    # takes minutes; the bound leaves room for a busy CI host, where a 1 s one on a
    # similar check failed at 1.09 s)
    assert elapsed < 5.0


def test_recursive_alias_is_rejected(tmp_path):
    with pytest.raises(ConfigError, match="recursive YAML alias"):
        load_suite(write(tmp_path, "r.yaml", "a: &a [1, *a]\n"))


def test_emulate_mode_loads_and_what_it_cannot_run_yet_is_refused_at_load(tmp_path):
    text = (ROOT / "suites/smoke.yaml").read_text().replace("mode: simulate", "mode: emulate")
    cells = list(expand(load_suite(write(tmp_path, "e.yaml", text))))
    assert cells and {c.mode for c in cells} == {"emulate"}
    plain = {c.id for c in expand(load_suite(ROOT / "suites/smoke.yaml"))}
    assert not plain & {c.id for c in cells}  # the mode is part of the cell id
    walled = list(expand(load_suite(write(tmp_path, "w.yaml", text.replace(
        "seed: 0\n", "seed: 0\nclock: wall\n")))))  # fmt: skip
    assert {c.clock for c in walled} == {"wall"}
    assert not {c.id for c in walled} & {c.id for c in cells}  # the clock is in the id
    real = text.replace("seed: 0\n", "seed: 0\ncompute_time: measured\n")
    timed = list(expand(load_suite(write(tmp_path, "m.yaml", real))))
    assert {c.compute_time for c in timed} == {"measured"}
    assert not {c.id for c in timed} & {c.id for c in cells}
    simulated = (
        (ROOT / "suites/smoke.yaml").read_text().replace("seed: 0\n", "seed: 0\nclock: wall\n")
    )
    with pytest.raises(ConfigError, match="clock applies to mode: emulate"):
        load_suite(write(tmp_path, "s.yaml", simulated))
    servers = text.replace(
        "{machines: 2, gpus_per_machine: 4}", "{machines: 2, gpus_per_machine: 4, cpu_servers: 1}"
    )
    servers = servers.replace("strategy: [", "strategy: [ps, ")
    served = list(expand(load_suite(write(tmp_path, "v.yaml", servers))))
    assert any(c.cluster.cpu_servers for c in served)  # summation servers are emulated


def test_compressor_forms_are_equivalent(tmp_path):
    base = (
        "name: c\ngrid:\n  model: tiny-mlp\n  network: {inter_gbps: 10}\n  cluster: {machines: 2}\n"
    )
    forms = ["topk-1pct", "'topk:ratio=0.01'", "{kind: topk, ratio: 0.01}", "{kind: topk}"]
    specs = {
        load_suite(write(tmp_path, f"c{i}.yaml", base + f"  compressor: {f}\n")).grid.compressor[0]
        for i, f in enumerate(forms)
    }
    assert specs == {TopkSpec(kind="topk", ratio=0.01)}
    assert PRESETS["topk-1pct"].label() == "topk-1pct"
    assert TopkSpec(kind="topk", ratio=0.05).label() == "topk:ratio=0.05"


def _modules_after(code: str, *names: str) -> list[str]:
    """Run `code` in a fresh interpreter (other tests' imports cannot leak in) and say,
    for each of `names`, whether it ended up in sys.modules."""
    probe = f"import sys; {code}; print(*[n in sys.modules for n in {list(names)!r}])"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_loading_imports_neither_torch_nor_ray():
    code = (
        "from gcbench.config import load_suite, expand; "
        f"expand(load_suite({str(ROOT / 'suites/smoke.yaml')!r}))"
    )
    assert _modules_after(code, "torch", "ray") == ["False", "False"]


def test_compressor_specs_import_no_torch():
    assert _modules_after("import gcbench.compress.specs", "torch") == ["False"]


def test_zoo_profile_files_do_not_import_the_results_store():
    # profile_io writes files with gcbench.files.atomic_write, not through gcbench.results
    code = "import gcbench.zoo.profile_io, gcbench.zoo.catalog, gcbench.zoo.devices"
    assert _modules_after(code, "gcbench.results", "torch", "ray") == ["False", "False", "False"]


def test_committed_schema_is_current_and_accepts_shipped_suites():
    committed = json.loads((ROOT / "schema/suite.schema.json").read_text())
    assert committed == suite_schema(), "run: gcbench schema > schema/suite.schema.json"
    # bounds in JSON Schema's words: pydantic's own `gt`/`le` (a type whose bounds sit
    # inside a before-validator) are keys an editor's validator ignores
    text = json.dumps(committed)
    assert not re.search(r'"(gt|ge|lt|le)": ', text), "a bound escaped as pydantic's key"
    validator = jsonschema.Draft202012Validator(committed)
    for path in sorted((ROOT / "suites").glob("*.yaml")):
        first = path.read_text().splitlines()[0]
        assert first == "# yaml-language-server: $schema=../schema/suite.schema.json", path
        validator.validate(yaml.safe_load(path.read_text()))
        load_suite(path)


# --- numbers: finite, within range, and unchanged by the trip to a Ray worker -------------

NUMBERS = """\
name: n
seed: {seed}
grid:
  model: [{{name: tiny-mlp, batch_size: {batch}}}]
  compressor: [{compressor}]
  strategy: [{strategy}]
  fusion: [{fusion}]
  network: [{{inter_gbps: {inter}, intra_gbs: {intra}, inter_latency_us: {latency}}}]
  cluster: [{{machines: {machines}, gpus_per_machine: {gpus}}}]
"""
GOOD = dict(
    seed=0,
    batch=32,
    compressor="none",
    strategy="allgather",
    fusion="ddp",
    inter=10,
    intra=150,
    latency=25,
    machines=2,
    gpus=2,
)


@pytest.mark.parametrize(
    ("change", "line", "message"),
    [
        # At 81933ad: stored as inf, simulated as 150 GB/s (JSON turns inf into null).
        ({"intra": ".inf"}, 8, "grid.network.0.intra_gbs: must be a finite number, got inf"),
        # At 81933ad: validated, then every cell failed on the worker.
        ({"inter": ".inf"}, 8, "grid.network.0.inter_gbps: must be a finite number, got inf"),
        ({"inter": "-.inf"}, 8, "grid.network.0.inter_gbps: must be a finite number, got -inf"),
        ({"inter": ".nan"}, 8, "grid.network.0.inter_gbps: must be a finite number, got nan"),
        ({"inter": "1.0e-9"}, 8, "grid.network.0.inter_gbps: must be ≥ 1e-06, got 1e-09"),
        ({"inter": "2.0e+6"}, 8, "grid.network.0.inter_gbps: must be ≤ 1e+06, got 2000000.0"),
        ({"latency": "1.0e400"}, 8, "grid.network.0.inter_latency_us: must be a finite number"),
        # At 81933ad: validated, then pyarrow could not store the row.
        ({"seed": 2**70}, 2, "seed: must be ≤ 9,223,372,036,854,775,807, got 1,180,591,"),
        ({"batch": 2**64}, 4, "grid.model.0.batch_size: must be ≤ 1,048,576, got 18,446,744,"),
        ({"machines": 2**64}, 9, "grid.cluster.0.machines: must be ≤ 1,048,576, got 18,446,"),
        ({"machines": 2**19, "gpus": 8}, 9, "grid.cluster.0: 524,288 machines × 8 GPUs = 4,194,"),
        ({"fusion": "fixed:" + "9" * 30}, 7, "grid.fusion.0: must be ddp, tensor or fixed:<bytes>"),
        ({"compressor": "{kind: threshold, threshold: .inf}"}, 5, "threshold: must be a finite"),
        ({"compressor": "'threshold:threshold=inf'"}, 5, "grid.compressor.0: must be a finite"),
        ({"compressor": "{kind: qsgd, levels: 2147483648}"}, 5, "levels: must be ≤ 2,147,483,647"),
        # At 81933ad: the COVAP strategy simulated 2^70 steps (it never finished).
        ({"compressor": "{kind: covap, interval: 2048}", "strategy": "covap"}, 5, "≤ 1024"),
    ],
)
def test_non_finite_and_out_of_range_numbers_are_one_line_each(tmp_path, change, line, message):
    path = write(tmp_path, "n.yaml", NUMBERS.format(**{**GOOD, **change}))
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    assert len(info.value.messages) == 1, info.value.messages
    assert info.value.messages[0].startswith(f"{path}:{line}: "), info.value.messages
    assert message in info.value.messages[0], info.value.messages


def test_the_limits_themselves_are_valid_and_run(tmp_path):
    """Every bound is inclusive and a cell at the bounds simulates to finite numbers that
    a results row can store (64-bit columns)."""
    import math

    import pyarrow as pa

    from gcbench.backends.simulate import simulate_cell
    from gcbench.config import expand

    text = NUMBERS.format(
        **{
            **GOOD,
            "seed": 2**63 - 1,
            "batch": 2**20,
            "inter": "1.0e-6",
            "intra": "1.0e+6",
            "latency": "1.0e+6",
            "machines": 2**10,
            "gpus": 2**10,
            "compressor": "'topk:ratio=1'",
            "fusion": "fixed:" + "9" * 18,
        }
    )
    (cell,) = expand(load_suite(write(tmp_path, "n.yaml", text)))
    metrics = simulate_cell(cell).metrics
    assert all(math.isfinite(v) for v in metrics.values() if isinstance(v, float))
    pa.Table.from_pylist([{**cell.flat(), **metrics}])


def _valid_cells(small: bool):
    """Random valid cells: every network and cluster field, the model's batch and
    sequence length, the compressor's parameters and the seed anywhere in their ranges
    (`small`: tiny models on at most 4 × 4 GPUs, for simulating)."""
    from hypothesis import strategies as st

    from gcbench import strategies
    from gcbench.compress.specs import ADDITIVE
    from gcbench.config import Cell
    from gcbench.config.fields import (
        MAX_CORES,
        MAX_GPUS,
        MAX_GPUS_PER_MACHINE,
        MAX_LATENCY_US,
        MAX_NICS,
        MAX_RATE,
        MIN_EFFICIENCY,
        MIN_RATE,
    )
    from gcbench.zoo.catalog import MODELS
    from gcbench.zoo.devices import DEVICES
    from gcbench.zoo.profile_io import MAX_BATCH, MAX_SEQ_LEN

    def floats(lo: float, hi: float):
        return st.floats(lo, hi, allow_nan=False, allow_infinity=False)

    rate = floats(MIN_RATE, MAX_RATE)
    latency = floats(0, MAX_LATENCY_US)
    efficiency = floats(MIN_EFFICIENCY, 1)
    ratio = floats(1e-9, 1).filter(lambda r: r > 0)
    params = {
        "ratio": ratio,
        "sample_ratio": ratio,
        "threshold": floats(1e-30, 1e30).filter(lambda t: t > 0),
        "momentum": floats(0, 0.999999),
        "levels": st.integers(1, 2**31 - 1),
        "sparsity": floats(1, 1.999999),
        "rank": st.integers(1, 2**31 - 1),
        "interval": st.integers(1, 16 if small else 1024),
        "ef_init": floats(0, 1),
        "ef_ascend_steps": st.integers(1, 2**63 - 1),
        "ef_ascend_range": floats(0, 1),
    }
    own = {"powersgd", "acpsgd", "covap"}

    @st.composite
    def cells(draw):
        strategy = draw(st.sampled_from(sorted(strategies.names())))
        info = strategies.get(strategy)
        kinds = sorted(KINDS)
        if info.compressor == "own":
            kinds = [str(info.own)]
        elif info.compressor == "additive":
            kinds = sorted(ADDITIVE - own)
        elif info.compressor == "any":
            kinds = sorted(set(KINDS) - own)
        kind = draw(st.sampled_from(kinds))
        fields = [f for f in KINDS[kind].model_fields if f not in ("kind", "ef")]
        required = {f for f in fields if KINDS[kind].model_fields[f].is_required()}
        chosen = [f for f in fields if f in required or draw(st.booleans())]
        compressor = {"kind": kind, **{f: draw(params[f]) for f in chosen}}
        names = ["tiny-mlp", "tiny-cnn"] if small else sorted(MODELS)
        name = draw(st.sampled_from(names))
        model: dict = {"name": name}
        if not small and ESPRESSO.exists() and draw(st.integers(0, 9)) == 0:
            # a profile file (its path and sha256 travel with the cell, and the worker
            # reads it again)
            model = {"name": "resnet50", "profile": f"{ESPRESSO}#resnet50"}
        elif draw(st.booleans()):
            model["batch_size"] = draw(st.integers(1, 64 if small else MAX_BATCH))
        if "profile" not in model and MODELS[name].seq_len is not None and draw(st.booleans()):
            model["seq_len"] = draw(st.integers(1, MAX_SEQ_LEN))
        intra = draw(st.sampled_from(["nvlink", "pcie"]))
        network = {
            "intra": intra,
            "intra_gbs": draw(st.none() | rate),
            "intra_latency_us": draw(latency),
            "intra_efficiency": draw(efficiency),
            "inter_gbps": draw(rate),
            "inter_latency_us": draw(latency),
            "inter_efficiency": draw(efficiency),
            "nics_per_machine": draw(st.integers(1, 4 if small else MAX_NICS)),
            "server_gbps": draw(st.none() | rate),
        }
        gpus = draw(st.integers(1, 4 if small else MAX_GPUS_PER_MACHINE))
        servers = {"none": st.just(0), "optional": st.integers(0, 4), "required": st.integers(1, 4)}
        cluster = {
            "machines": draw(st.integers(1, 4 if small else MAX_GPUS // gpus)),
            "gpus_per_machine": gpus,
            "cpu_servers": draw(servers[info.servers]),
            "cpu_cores": draw(st.integers(1, 64 if small else MAX_CORES)),
            "summation_gbs": draw(st.none() | rate),
        }
        fusion = draw(
            st.sampled_from(["ddp", "tensor"])
            | st.integers(1, 10**18 - 1).map(lambda n: f"fixed:{n}")
        )
        return Cell.model_validate(
            {
                "model": model,
                "compressor": compressor,
                "network": network,
                "cluster": cluster,
                "strategy": strategy,
                "fusion": fusion,
                "device": draw(st.sampled_from(sorted(DEVICES))),
                "seed": draw(st.integers(-(2**63), 2**63 - 1)),
            }
        )

    return cells()


def _worker_copy(cell):
    """The cell as a Ray worker sees it (`runner.run`: `model_dump_json` on the driver,
    `model_validate_json` in the task)."""
    return type(cell).model_validate_json(cell.model_dump_json())


@settings(max_examples=3 * settings.default.max_examples, deadline=None)
@given(cell=_valid_cells(small=False))
def test_every_valid_cell_survives_the_trip_to_a_worker(cell):
    back = _worker_copy(cell)
    assert back == cell
    assert back.id == cell.id
    assert back.flat() == cell.flat()


@settings(max_examples=12, deadline=None)
@given(cell=_valid_cells(small=True))
def test_a_valid_cell_simulates_alike_after_the_trip(cell):
    import math

    from gcbench.backends.simulate import simulate_cell

    here, there = simulate_cell(cell).metrics, simulate_cell(_worker_copy(cell)).metrics
    here.pop("planner_s"), there.pop("planner_s")  # wall-clock time of a planner
    assert here == there
    assert all(math.isfinite(v) for v in here.values() if isinstance(v, float))


def test_infinite_bandwidth_did_not_survive_the_trip():
    """The defect at 81933ad, for the record: JSON has no infinity, pydantic writes null,
    and the default filled in (150 GB/s) on the worker. Such a value is now refused."""
    from pydantic import ValidationError

    from gcbench.config import Cell

    with pytest.raises(ValidationError, match="finite number"):
        Cell.model_validate(
            {
                "model": "tiny-mlp",
                "compressor": "none",
                "network": {"inter_gbps": 10, "intra_gbs": float("inf")},
                "cluster": {"machines": 2},
                "strategy": "fp32",
            }
        )


# --- duplicate keys and parameters --------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (  # at 81933ad the second value won
            TINY_SUITE.replace("{inter_gbps: 10}", "{inter_gbps: 10, inter_gbps: 100}"),
            [":6: grid.network.0.inter_gbps: key given twice (first on line 6)"],
        ),
        (
            TINY_SUITE + "seed: 1\nrepetitions: 3\nseed: 2\n",
            [
                ":9: repetitions: key given twice (first on line 2)",
                ":10: seed: key given twice (first on line 8)",
            ],
        ),
        (
            TINY_SUITE.replace("grid:\n", "grid:\n  cluster: [{machines: 4}]\n"),
            [":8: grid.cluster: key given twice (first on line 4)"],
        ),
        (  # 1 and 0x1 are one key to YAML
            TINY_SUITE + "include:\n  - {machines: 1}\nexclude:\n  - {1: a, 0x1: b}\n",
            [":11: exclude.0.1: key given twice (first on line 11)"],
        ),
    ],
)
def test_duplicate_yaml_keys_are_errors(tmp_path, text, expected):
    path = write(tmp_path, "d.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    assert [m.partition(" (first")[0] for m in info.value.messages] == [
        f"{path}{e}".partition(" (first")[0] for e in expected
    ]
    for message, e in zip(info.value.messages, expected, strict=True):
        assert message.startswith(f"{path}{e}")


def test_merge_keys_may_still_override(tmp_path):
    fine = TINY_SUITE.replace(
        "network: [{inter_gbps: 10}, {inter_gbps: 100}]",
        "network:\n    - &n {inter_gbps: 10, intra: pcie}\n    - {<<: *n, inter_gbps: 100}",
    )
    suite = load_suite(write(tmp_path, "f.yaml", fine))
    assert [(n.intra, n.inter_gbps) for n in suite.grid.network] == [("pcie", 10), ("pcie", 100)]


def test_duplicate_compressor_parameters_are_errors(tmp_path):
    text = TINY_SUITE.replace(
        "strategy: [fp32, fp16]", "strategy: allgather\n  compressor: ['topk:ratio=0.1,ratio=0.2']"
    )
    path = write(tmp_path, "c.yaml", text)
    with pytest.raises(ConfigError) as info:  # at 81933ad: ratio 0.2, silently
        load_suite(path)
    assert info.value.messages == [
        f"{path}:6: grid.compressor.0: compressor 'topk:ratio=0.1,ratio=0.2': "
        "parameter 'ratio' given twice"
    ]
    with pytest.raises(ConfigError, match="parameter 'kind' given twice"):
        load_suite(write(tmp_path, "k.yaml", text.replace("ratio=0.1,ratio=0.2", "kind=dgc")))


def test_lone_surrogates_are_refused(tmp_path):
    # Such a string cannot be written as UTF-8: the cell id (sha256 of its JSON) crashed.
    path = write(tmp_path, "s.yaml", TINY_SUITE + 'description: "x\\ud800y"\n')
    with pytest.raises(ConfigError, match=r":8: a string holds a lone surrogate"):
        load_suite(path)


# --- bounded reads --------------------------------------------------------------------------


def test_reads_stop_at_the_limit(tmp_path):
    """At 81933ad both read the whole file first: /dev/zero until memory ran out."""
    from gcbench.config.loader import MAX_BYTES

    start = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        load_suite("/dev/zero")
    assert info.value.messages == [
        "/dev/zero: cannot read suite: not a regular file (a device)"
    ]  # before a byte is read (at 81933ad: read until memory ran out)
    text = TINY_SUITE.replace("[tiny-mlp, tiny-cnn]", "[{name: m, profile: /dev/zero}]")
    path = write(tmp_path, "z.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    assert info.value.messages == [
        f"{path}:4: grid.model.0: /dev/zero: cannot read profile: not a regular file (a device)"
    ]
    assert time.perf_counter() - start < 2.0  # a safety bound: two reads of a few MB
    big = write(tmp_path, "big.yaml", b"#" * (MAX_BYTES + 10))
    with pytest.raises(ConfigError, match=f"file is {MAX_BYTES + 10:,} bytes; suite files are"):
        load_suite(big)


def test_a_named_pipe_is_refused_wherever_gcbench_reads_a_file(tmp_path):
    """A named pipe given as a suite, a network profile, a points file or an nccl-tests
    output blocked forever in open() (issue #35 item 18): each is one line, at once."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="pipe: cannot read suite: not a regular file .a named"):
        load_suite(fifo)
    text = TINY_SUITE.replace("network: [{inter_gbps: 10}, {inter_gbps: 100}]",
                              f"network: [{{profile: {fifo}}}]")  # fmt: skip
    with pytest.raises(ConfigError, match="cannot read network profile: not a regular file"):
        load_suite(write(tmp_path, "s.yaml", text))
    from typer.testing import CliRunner

    from gcbench.cli import app

    points = write(tmp_path, "p.yaml", f"network: {{inter_gbps: 100}}\npoints:\n"
                   f"  - {{nccl_tests: {fifo}}}\n")  # fmt: skip
    for path in (fifo, points):
        r = CliRunner().invoke(app, ["calibrate", str(path), "--fit", "inter_efficiency"])
        assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
        assert "not a regular file (a named pipe)" in r.stderr, r.stderr


def test_a_folder_given_for_a_file_is_one_line_wherever_gcbench_reads_one(tmp_path):
    """A folder named like a suite, a profile or a points file went through `os.fdopen`,
    which refuses folders, before the regular-file check: a traceback and exit 1."""
    from typer.testing import CliRunner

    from gcbench.cli import app

    folder = tmp_path / "d.yaml"
    folder.mkdir()
    for args in (["validate", str(folder)],
                 ["simulate", "--model", "tiny-mlp", "--network", str(folder)],
                 ["calibrate", str(folder)]):  # fmt: skip
        r = CliRunner().invoke(app, args)
        assert r.exit_code == 2 and r.stderr.count("\n") == 1, (args, r.output)
        assert "not a regular file (a folder)" in r.stderr, r.stderr


def test_yaml_booleans_are_not_numbers(tmp_path):
    """`inter_efficiency: true` was 1.0 and `ratio: true` 100% (pydantic's lax floats),
    while `machines: true` was refused: every number refuses a boolean, at its line."""
    text = TINY_SUITE.replace("{inter_gbps: 100}", "{inter_gbps: 100, inter_efficiency: true}")
    with pytest.raises(ConfigError) as info:
        load_suite(write(tmp_path, "s.yaml", text))
    assert info.value.messages[0].endswith(
        "s.yaml:6: grid.network.1.inter_efficiency: must be a number, got True"
    ), info.value.messages
    text = TINY_SUITE.replace("[fp32, fp16]", "[allgather]")
    text += "  compressor: [{kind: topk, ratio: true}]\n"
    with pytest.raises(ConfigError, match="ratio: must be a number, got True"):
        load_suite(write(tmp_path, "c.yaml", text))


def test_yaml_nested_past_the_parsers_recursion_is_one_line(tmp_path):
    """600 levels of `[` was PyYAML's RecursionError, a traceback."""
    path = write(tmp_path, "deep.yaml", "name: t\ngrid: " + "[" * 600 + "]" * 600 + "\n")
    with pytest.raises(ConfigError, match="deep.yaml: values nested too deeply"):
        load_suite(path)


def test_precision_is_a_model_field_checked_against_the_device(tmp_path):
    """`precision` (issue #31): fp32 by default and left out of the cell's id then (cells
    of earlier runs keep theirs); bf16 only on GPUs with BF16 tensor cores, with the line
    that asks for it; a column `--only` and reports can filter on."""
    text = (
        "name: p\ndevice: {device}\ngrid:\n  model:\n    - resnet50\n"
        "    - {{name: resnet50, precision: {precision}}}\n  strategy: fp32\n"
        "  network: {{inter_gbps: 10}}\n  cluster: {{machines: 2}}\n"
    )
    path = write(tmp_path, "ok.yaml", text.format(device="h100", precision="amp-bf16"))
    plain, amp = expand(load_suite(path))
    assert "precision" not in plain.canonical_json() and plain.model.precision == "fp32"
    assert (plain.flat()["precision"], amp.flat()["precision"]) == ("fp32", "amp-bf16")
    assert plain.id != amp.id
    bad = write(tmp_path, "bad.yaml", text.format(device="v100", precision="amp-bf16"))
    with pytest.raises(ConfigError) as info:
        expand(load_suite(bad))
    (message,) = info.value.messages
    assert message.startswith(f"{bad}:") and "v100 has no BF16 tensor cores" in message
    typo = write(tmp_path, "typo.yaml", text.format(device="h100", precision="fp8"))
    with pytest.raises(ConfigError) as info:
        load_suite(typo)
    assert info.value.messages[0].startswith(f"{typo}:6:")
    from gcbench.config.models import ModelSpec

    with pytest.raises(ValidationError, match="measured at the precision it was run at"):
        ModelSpec.model_validate({"name": "mine", "profile": "p.json", "precision": "tf32"})


def test_the_schema_takes_a_network_named_by_its_profile_alone():
    """A network entry may name a profile and nothing else (its line rate comes from the
    profile); one with neither a line rate nor a profile is still refused."""
    validator = jsonschema.Draft202012Validator(suite_schema())
    suite = {"name": "x", "grid": {"model": "resnet50", "cluster": {"machines": 2}}}
    for network, ok in (({"profile": "dgx-h100-ndr"}, True), ({"inter_gbps": 25}, True),
                        ({"intra": "nvlink"}, False)):  # fmt: skip
        suite["grid"]["network"] = network
        assert validator.is_valid(suite) == ok, network
