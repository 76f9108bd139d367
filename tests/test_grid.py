"""Grid expansion, filters and cell ids."""

from __future__ import annotations

import hashlib

import pytest

from gcbench.config import Cell, expand, load_suite, parse_only
from gcbench.errors import ConfigError

from conftest import ROOT, TINY_SUITE, write


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
