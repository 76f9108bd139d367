"""The option space (ByteComp §4.2): counts, the token form, and what is rejected."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.errors import ConfigError
from gcbench.sim.options import (
    PRESETS,
    Op,
    Option,
    Phase,
    check,
    counts,
    declared_wire_bytes,
    enumerate_options,
    enumerate_paths,
)


def test_a_non_additive_compressor_has_bytecomps_174_paths_and_4341_options():
    n = counts(additive=False)
    assert (n["flat_paths"], n["hierarchical_paths"], n["paths"]) == (12, 162, 174)
    assert (n["flat_options"], n["hierarchical_options"], n["options"]) == (63, 4278, 4341)


def test_additive_compressors_add_compressed_allreduce_and_reduce_scatter():
    plain, additive = enumerate_options(), enumerate_options(additive=True)
    assert set(plain) < set(additive)
    extra = {o.name for o in additive} - {o.name for o in plain}
    assert "gc flat:ar* gd" in extra and "gc flat:rs* flat:ag* gd" in extra
    assert all(
        any(p.compressed and p.collective in ("allreduce", "reduce_scatter") for p in o.phases)
        for o in additive
        if o.name in extra
    )


def test_every_option_is_valid_unique_and_round_trips_its_name():
    for additive in (False, True):
        options = enumerate_options(additive=additive)
        assert len({o.name for o in options}) == len(options)
        for o in options:
            check(o, additive=additive)
            assert Option.parse(o.name) == o


def test_flat_paths_by_hand():
    """Table 2 x rule 3: allreduce; allgather; two divisible pairs uncompressed; and each
    first step (reduce-scatter, reduce, alltoall, gather) with a second step that is
    compressed or not; compressed-compressed pairs forward or recompress."""
    assert sorted(o.name for o in enumerate_paths(hierarchical=False)) == sorted(
        [
            "flat:ar",
            "gc flat:ag* gd",
            "flat:rs flat:ag",
            "flat:rs gc flat:ag* gd",
            "flat:red flat:bc",
            "flat:red gc flat:bc* gd",
            "gc flat:a2a* gd flat:ag",
            "gc flat:a2a* flat:ag* gd",
            "gc flat:a2a* gd gc flat:ag* gd",
            "gc flat:ga* gd flat:bc",
            "gc flat:ga* flat:bc* gd",
            "gc flat:ga* gd gc flat:bc* gd",
        ]
    )


def test_placements_double_per_operation():
    from collections import Counter

    paths = enumerate_paths()
    per_path = Counter(o.path for o in enumerate_options())  # one pass over the 4,341
    assert set(per_path) == set(paths)
    for path in paths:
        assert per_path[path] == 2 ** len(path.ops), path.name


def test_user_constraint_at_most_one_compression():
    one = enumerate_options(max_compressions=1)
    assert one and all(sum(op.op == "c" for op in o.ops) <= 1 for o in one)
    assert len(one) < 4341


@pytest.mark.parametrize(
    ("text", "additive", "message"),
    [
        ("gc flat:ar* gd", False, "additive"),  # defect 5: never silently an allgather
        ("gc flat:rs* flat:ag* gd", False, "additive"),
        ("flat:rs flat:bc", False, "pairs with allgather"),
        ("gc flat:a2a* flat:bc* gd", False, "pairs with allgather"),
        ("intra:ar inter:ar", False, "intra, inter..., intra"),
        ("intra:ar inter:ar intra:ar", False, "reduce_scatter or reduce as a first step"),
        ("intra:rs flat:ar intra:ag", False, "intra, inter..., intra"),
        ("gc flat:ag*", False, "decompress at the end"),
        ("flat:ag* gd", False, "needs a compression"),
        ("gc flat:a2a* flat:ag", False, "decompress before it"),
        ("gc gd flat:ar", False, "needs uncompressed|needs compressed|stand together"),
        ("fp16 gc flat:ag* gd", False, "fp16"),
    ],
)
def test_invalid_options_are_one_clear_line(text, additive, message):
    with pytest.raises(ConfigError, match=message) as e:
        check(Option.parse(text), additive=additive, compressor="dgc")
    assert len(e.value.messages) == 1


def test_bad_tokens_are_named():
    for text in ("flat:xx", "flat", "orbit:ar", "gq flat:ar", ""):
        with pytest.raises(ConfigError):
            Option.parse(text)


def test_presets_are_options_of_the_space():
    for name, option in PRESETS.items():
        check(option, additive=name == "allreduce")
        assert option.name and name
    assert PRESETS["allgather-2level"].steps == (
        Phase("intra", "reduce_scatter"),
        Op("c"),
        Phase("inter", "allgather", True),
        Op("d"),
        Phase("intra", "allgather"),
    )


def test_declared_wire_bytes_by_hand():
    """Mean bytes per GPU, M=4 machines x G=8 GPUs, a bucket of e elements, payload p(e)."""
    M, G, e = 4, 8, 8_000_000
    N = M * G

    def p(x):
        return x / 8

    def wb(text):
        return declared_wire_bytes(Option.parse(text), e, M, G, p)

    assert wb("flat:ar") == pytest.approx(2 * (N - 1) / N * 4 * e)
    assert wb("fp16 flat:ar") == pytest.approx(2 * (N - 1) / N * 2 * e)
    assert wb("gc flat:ag* gd") == pytest.approx((N - 1) * p(e))
    hier = 2 * (G - 1) / G * 4 * e + 2 * (M - 1) / M * 4 * e / G
    assert wb("intra:rs inter:ar intra:ag") == pytest.approx(hier)
    # two-level allgather: each of the G rings allgathers p(e/G) over M machines
    assert wb("intra:rs gc inter:ag* gd intra:ag") == pytest.approx(
        2 * (G - 1) / G * 4 * e + (M - 1) * p(e / G)
    )
    # intra reduce: only the root GPU of each machine sends across machines
    assert wb("intra:red inter:ar intra:bc") == pytest.approx(
        (G - 1) / G * 4 * e + 2 * (M - 1) / M * 4 * e / G + (G - 1) / G * 4 * e
    )
    # forwarded: the second allgather carries the N payloads of each shard
    assert wb("gc flat:a2a* flat:ag* gd") == pytest.approx(
        (N - 1) / N * p(e) + (N - 1) * p(e)
    )


def test_options_cli_counts_and_lists():
    r = CliRunner().invoke(app, ["options", "--compressor", "dgc"])
    assert r.exit_code == 0, r.output
    assert "174 paths (12 flat, 162 hierarchical)" in r.stdout
    assert "4,341 options" in r.stdout and "(63 flat, 4,278 hierarchical)" in r.stdout
    assert "  intra:rs gc inter:ag* gd intra:ag  [4 placements]" in r.stdout
    r = CliRunner().invoke(app, ["options", "--compressor", "randomk-1pct", "--json"])
    data = json.loads(r.stdout)
    assert data["additive"] and data["counts"]["options"] == len(data["options"]) > 4341
    r = CliRunner().invoke(app, ["options", "--compressor", "nope"])
    assert r.exit_code == 2 and "unknown compressor" in r.stderr
