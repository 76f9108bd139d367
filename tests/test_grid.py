"""Grid expansion, filters and cell ids."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.config import Cell, expand, load_suite, parse_only
from gcbench.errors import ConfigError

from conftest import ROOT, TINY_SUITE, write


def invoke(*args: str):
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def test_smoke_grid_size_and_filters():
    suite = load_suite(ROOT / "suites/smoke.yaml")
    cells = expand(suite)
    # 3 models x 2 strategies x (2 networks x 2 multi-machine sizes + 1 single-machine)
    assert len(cells) == 3 * 2 * (2 * 2 + 1) == 30
    assert len({c.id for c in cells}) == 30
    assert not [c for c in cells if c.cluster.machines == 1 and c.network.inter_gbps == 10]


def test_include_exclude_and_only(tmp_path):
    suite = load_suite(
        write(
            tmp_path,
            "t.yaml",
            TINY_SUITE + "include: [{model: tiny-mlp}]\n"
            "exclude: [{strategy: fp16, machines: [1, 3]}]\n",
        )
    )
    cells = expand(suite)
    assert {c.model.name for c in cells} == {"tiny-mlp"}
    assert len(cells) == 2 * 2 * 2 - 2  # the two fp16 single-machine cells are gone
    only = parse_only(["inter_gbps=100", "machines=2", "machines=1"])
    assert {(c.network.inter_gbps, c.cluster.machines) for c in expand(suite, only)} == {
        (100, 1),
        (100, 2),
    }


def test_filter_keys_are_checked(tmp_path):
    with pytest.raises(ConfigError, match=r"t.yaml:9: exclude.0: unknown filter key 'colour'"):
        load_suite(write(tmp_path, "t.yaml", TINY_SUITE + "exclude:\n  - {colour: red}\n"))
    with pytest.raises(ConfigError, match="unknown key 'colour'"):
        parse_only(["colour=red"])
    with pytest.raises(ConfigError, match="expected key=value"):
        parse_only(["machines"])


def test_compressor_free_strategies_run_once(tmp_path):
    text = TINY_SUITE.replace(
        "strategy: [fp32, fp16]", "strategy: [fp32]\n  compressor: [topk-1pct, efsignsgd]"
    )
    cells = expand(load_suite(write(tmp_path, "t.yaml", text)))
    assert len(cells) == 2 * 2 * 2
    assert {c.compressor.kind for c in cells} == {"none"}


def test_cell_id_is_sha256_of_canonical_json_without_defaults(tmp_path):
    implicit = expand(load_suite(write(tmp_path, "a.yaml", TINY_SUITE)))
    explicit_text = TINY_SUITE.replace(
        "{inter_gbps: 10}", "{inter_gbps: 10, inter_efficiency: 0.7, intra: nvlink}"
    )
    explicit = expand(load_suite(write(tmp_path, "b.yaml", explicit_text)))
    assert [c.id for c in implicit] == [c.id for c in explicit]
    cell = implicit[0]
    assert cell.id == hashlib.sha256(cell.canonical_json().encode()).hexdigest()
    assert "inter_efficiency" not in cell.canonical_json()
    # The seed is part of a cell's identity; the number of repetitions is not.
    reseeded = expand(load_suite(write(tmp_path, "c.yaml", TINY_SUITE + "seed: 7\n")))
    assert not {c.id for c in reseeded} & {c.id for c in implicit}
    more = expand(
        load_suite(
            write(tmp_path, "d.yaml", TINY_SUITE.replace("repetitions: 2", "repetitions: 5"))
        )
    )
    assert [c.id for c in more] == [c.id for c in implicit]
    assert Cell.model_validate_json(cell.model_dump_json()).id == cell.id


def test_cell_id_is_stable_across_releases():
    """Changing this value orphans every stored result: do it only on purpose."""
    cell = Cell.model_validate(
        {
            "model": "resnet50",
            "compressor": "none",
            "network": {"inter_gbps": 100},
            "cluster": {"machines": 2},
            "strategy": "fp32",
        }
    )
    assert cell.canonical_json() == (
        '{"cluster":{"machines":2},"compressor":{"kind":"none"},'
        '"model":{"batch_size":32,"name":"resnet50"},'
        '"network":{"inter_gbps":100.0,"intra_gbs":150.0},"strategy":"fp32"}'
    )


# --- filters: one meaning per value, and a word when one matches nothing -------------------

FILTERED = TINY_SUITE.replace(
    "strategy: [fp32, fp16]",
    "strategy: [allgather, hitopkcomm]\n  compressor: [topk-1pct, 'topk:ratio=0.1']",
)  # 2 models x 2 strategies x 2 compressors x 2 networks x 2 clusters = 32 cells


@pytest.mark.parametrize(
    "spelling",
    # at 81933ad: "10" and 1e1 (a string to YAML 1.1) matched nothing, silently
    ["10", "10.0", "'10'", "1e1", "'1e1'", "1.0e+1", "[10]", "['1e1', 7]"],
)
def test_number_spellings_match_alike(tmp_path, spelling):
    suite = load_suite(
        write(tmp_path, "f.yaml", FILTERED + f"exclude: [{{inter_gbps: {spelling}}}]\n")
    )
    cells = expand(suite)
    assert len(cells) == 16 and {c.network.inter_gbps for c in cells} == {100}
    text = spelling.strip("[]").split(",")[0].strip("'")
    only = expand(
        load_suite(write(tmp_path, "g.yaml", FILTERED)), parse_only([f"inter_gbps={text}"])
    )
    assert {c.network.inter_gbps for c in only} == {10}


@pytest.mark.parametrize(
    ("key", "spellings", "kept"),
    [
        # at 81933ad: 'topk:ratio=0.01' matched nothing (the column holds the preset name)
        ("compressor", ["topk-1pct", "'topk:ratio=0.01'", "topk", "'topk:ratio=1e-2'"], 16),
        ("compressor", ["'topk:ratio=0.1'", "'topk:ratio=0.10'"], 16),
        ("strategy", ["hitopkcomm", "allgather-2level"], 16),
        ("machines", ["2", "'2'", "2.0"], 16),
        ("compressor_kind", ["topk"], 0),
    ],
)
def test_other_spellings_match_alike(tmp_path, key, spellings, kept):
    for i, spelling in enumerate(spellings):
        text = FILTERED + f"exclude: [{{{key}: {spelling}}}]\n"
        cells = expand(load_suite(write(tmp_path, f"s{i}.yaml", text)))
        assert len(cells) == kept, spelling


def test_bad_filter_values_are_errors_with_their_line(tmp_path):
    text = FILTERED + (
        "include:\n  - machines: two\n    inter_gbps: fast\n"
        "exclude:\n  - {compressor: zipit}\n  - {strategy: warp}\n  - {machines: []}\n"
    )
    path = write(tmp_path, "b.yaml", text)
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    assert [m.removeprefix(f"{path}:") for m in info.value.messages] == [
        "10: include.0.machines: must be an integer, got 'two'",
        "11: include.0.inter_gbps: must be a number, got 'fast'",
        "13: exclude.0.compressor: 'zipit': unknown compressor 'zipit'; presets: "
        + info.value.messages[2].split("presets: ", 1)[1],
        "14: exclude.1.strategy: unknown strategy 'warp'; valid: "
        + info.value.messages[3].split("valid: ", 1)[1],
        "15: exclude.2.machines: an empty list matches no cell; give at least one value",
    ]


def test_filters_that_match_nothing_are_reported(tmp_path):
    from gcbench.config import NoCellsLeft, expand_suite

    text = FILTERED + (
        "include:\n  - {model: tiny-mlp}\n  - {model: resnet50}\n"
        "exclude:\n  - {machines: 7}\n  - {model: tiny-cnn}\n  - {inter_gbps: 100}\n"
    )
    path = write(tmp_path, "w.yaml", text)
    suite = load_suite(path)
    found = expand_suite(suite, parse_only(["gpus=[4, 8]", "fusion=ddp"]), where=str(path))
    assert len(found.cells) == 4  # tiny-mlp, 10 Gbit/s, 2 x 2 GPUs
    assert [str(w) for w in found.warnings] == [
        "include.1: {model: resnet50} matches no cell",
        "exclude.0: {machines: 7} matches no cell",
        "exclude.1: {model: tiny-cnn} matches no cell",  # include kept no tiny-cnn
    ]
    with pytest.raises(NoCellsLeft) as info:
        expand_suite(suite, parse_only(["gpus=[4, 8]", "seed=3", "inter_gbps=1e1"]))
    assert info.value.messages == [
        "suite 'tiny': no cells left after the include/exclude/--only filters"
    ]
    assert [str(w) for w in info.value.warnings][3:] == ["--only seed=3: matches no cell"]
    # On the command line: one warning line each, with its place in the file.
    r = invoke("validate", str(path))
    assert r.exit_code == 0, r.output
    assert r.stderr.splitlines() == [
        f"warning: {path}:11: include.1: {{model: resnet50}} matches no cell",
        f"warning: {path}:13: exclude.0: {{machines: 7}} matches no cell",
        f"warning: {path}:14: exclude.1: {{model: tiny-cnn}} matches no cell",
    ]


def test_validate_refuses_what_run_refuses(tmp_path):
    """At 81933ad `validate` said ok (0 cells) for a suite `run` refused."""
    path = write(tmp_path, "e.yaml", TINY_SUITE + "include: [{machines: 3}]\n")
    for args in (["validate", str(path)], ["run", str(path), "--results", str(tmp_path / "r")]):
        r = invoke(*args)
        assert r.exit_code == 2, r.output
        assert r.stderr.splitlines() == [
            f"warning: {path}:8: include.0: {{machines: 3}} matches no cell",
            f"error: {path}: no cells left after the include/exclude filters",
        ]
    assert not (tmp_path / "r").exists()
    smoke = ROOT / "suites/smoke.yaml"
    r = invoke("run", str(smoke), "--only", "machines=7", "--results", str(tmp_path / "r"))
    assert r.exit_code == 2
    assert r.stderr.splitlines() == [
        "warning: --only machines=7: matches no cell",
        f"error: {smoke}: no cells left after the include/exclude/--only filters",
    ]


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        # at 81933ad: yaml's ParserError escaped as a traceback
        ("machines=[2", "--only 'machines=[2': expected ',' or ']', but got '<stream end>'"),
        ("machines=two", "--only 'machines=two': machines: must be an integer, got 'two'"),
        ("machines=[1, x]", "--only 'machines=[1, x]': machines: item 1: must be an integer"),
        ("machines=[[1]]", "--only 'machines=[[1]]': machines: item 0: must be an integer"),
        ("compressor=topk:ratio=0.1,ratio=0.2", "parameter 'ratio' given twice"),
        ("inter_gbps=inf", "--only 'inter_gbps=inf': inter_gbps: must be a finite number"),
    ],
)
def test_malformed_only_is_one_line(tmp_path, flag, message):
    with pytest.raises(ConfigError) as info:
        parse_only([flag])
    assert len(info.value.messages) == 1 and message in info.value.messages[0]
    r = invoke("run", str(ROOT / "suites/smoke.yaml"), "--only", flag, "--results", str(tmp_path))
    assert r.exit_code == 2 and r.stderr == f"error: {info.value.messages[0]}\n"
    assert list(tmp_path.iterdir()) == []


# --- huge grids: counted before expanding, expanded lazily ---------------------------------


def _grid(tmp_path, models: int, networks: int, clusters: int, extra: str = "") -> Path:
    lines = ["name: huge", "grid:", "  model:"]
    lines += [f"    - {{name: tiny-mlp, batch_size: {i + 1}}}" for i in range(models)]
    lines += ["  network:"] + [f"    - {{inter_gbps: {i + 1}}}" for i in range(networks)]
    lines += ["  cluster:"] + [f"    - {{machines: {i + 1}}}" for i in range(clusters)]
    return write(tmp_path, "huge.yaml", "\n".join(lines) + "\n" + extra)


def test_a_huge_grid_is_refused_before_it_is_expanded(tmp_path, monkeypatch):
    """At 81933ad `validate` of this 10^9-point suite was still expanding after 20 s, at
    1.4 GB and growing. The count only: the expansion is never entered (it raises here if
    it is; a timed assertion stood here before and failed on a busy CI host)."""
    from gcbench.config import grid, grid_points

    def never(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the grid was expanded")

    path = _grid(tmp_path, 1000, 1000, 1000, "exclude: [{machines: 0}]\n")
    suite = load_suite(path)
    assert grid_points(suite) == 10**9
    expected = (
        f"error: {path}: grid: 1,000,000,000 grid points (model 1,000 × network 1,000 × "
        "cluster 1,000), more than the 1,000,000 allowed; split the suite, or raise --max-cells\n"
    )
    with monkeypatch.context() as m:
        m.setattr(grid, "_expand", never)
        for args in (
            ["validate", str(path)],
            ["run", str(path), "--results", str(tmp_path / "r")],
        ):
            r = invoke(*args)
            assert r.exit_code == 2 and r.stderr == expected  # filters are not even tried
    assert not (tmp_path / "r").exists()
    r = invoke("validate", str(_grid(tmp_path, 10, 10, 10)), "--max-cells", "999")
    assert r.exit_code == 2 and "1,000 grid points" in r.stderr
    r = invoke("validate", str(_grid(tmp_path, 10, 10, 10)), "--max-cells", "1000")
    assert r.exit_code == 0 and "1000 cells" in r.stdout


def test_lazy_expansion_applies_only_as_it_goes(tmp_path):
    from gcbench.config import expand_suite, iter_cells

    suite = load_suite(_grid(tmp_path, 10, 20, 30))
    everything = expand(suite)
    assert len(everything) == 6000
    assert [c.id for c in iter_cells(suite)] == [c.id for c in everything]
    only = parse_only(["machines=[3, 5]", "inter_gbps=7"])
    kept = [c for c in everything if c.cluster.machines in (3, 5) and c.network.inter_gbps == 7]
    assert [c.id for c in expand_suite(suite, only).cells] == [c.id for c in kept]
    # a generator: the first cell comes without the rest being made
    first = next(iter(iter_cells(load_suite(_grid(tmp_path, 1000, 1000, 1000)))))
    assert first.model.batch_size == 1 and first.cluster.machines == 1


def test_exclude_takes_the_compressor_forms_the_grid_takes(tmp_path):
    """A compressor written as a mapping in the grid could not be excluded the same way
    (issue #35: `exclude.0.compressor: must be a preset or kind:param=value`)."""
    text = ("name: ex\ngrid:\n  model: [resnet50]\n  strategy: [allgather]\n"
            "  compressor: [{kind: topk, ratio: 0.01}, dgc]\n  network: [{inter_gbps: 10}]\n"
            "  cluster: [{machines: 2}]\n"
            "exclude:\n  - {compressor: {kind: topk, ratio: 0.01}}\n")  # fmt: skip
    (c,) = expand(load_suite(write(tmp_path, "ex.yaml", text)))
    assert c.compressor.kind == "dgc"
