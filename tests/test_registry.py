"""The strategy registry (`gcbench.strategies`): one class per strategy, each name once,
users' strategies registered by a call or through the `gcbench.strategies` entry points."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import TypeAdapter
from typer.testing import CliRunner

from gcbench import strategies
from gcbench.cli import app
from gcbench.compress.specs import CompressorSpec
from gcbench.errors import ConfigError
from gcbench.sim.iteration import Plan, fuse
from gcbench.sim.options import Option
from gcbench.strategies import Step, Strategy, StrategyError


def test_registering_a_taken_name_is_a_one_line_error():
    class Again(Strategy):
        name = "fp32"
        description = "a second fp32"

        def build(self, cell: Any, profile: Any, costs: Any) -> list[Step]:
            raise AssertionError

    with pytest.raises(StrategyError) as info:
        strategies.register(Again)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith("strategy 'fp32' is registered twice: by gcbench.strategies.")
    assert message.endswith("test_registry.test_registering_a_taken_name_is_a_one_line_error"
                            ".<locals>.Again")  # fmt: skip
    assert strategies.get("fp32").description.startswith("ring allreduce")  # unchanged


def test_an_alias_is_a_name_too():
    class Alias(Strategy):
        name = "my-hitopk"
        description = "takes an alias that is taken"
        aliases = ("hitopkcomm",)

        def build(self, cell: Any, profile: Any, costs: Any) -> list[Step]:
            raise AssertionError

    with pytest.raises(StrategyError, match="'hitopkcomm' is registered twice"):
        strategies.register(Alias)
    assert strategies.find("my-hitopk") is None


@pytest.mark.parametrize(
    ("attrs", "says"),
    [
        ({"name": "two words"}, "non-empty word"),
        ({"compressor": "some"}, "compressor must be"),
        ({"servers": "many"}, "servers must be"),
        ({"compressor": "own"}, "names its compressor kind"),
        ({"own": "zipit", "compressor": "own"}, "names its compressor kind"),
    ],
)
def test_a_declaration_out_of_range_is_refused(attrs, says):
    cls = type(
        "Bad", (Strategy,),
        {"name": "bad", "description": "", "build": lambda self, c, p, k: [], **attrs},
    )  # fmt: skip
    with pytest.raises(StrategyError, match=says):
        strategies.register(cls)
    assert strategies.find("bad") is None


def test_a_strategy_without_build_is_refused():
    class NoBuild(Strategy):
        name = "nobuild"
        description = "forgets build"

    with pytest.raises(StrategyError, match="does not implement build"):
        strategies.register(NoBuild)


class FirstFp16(Strategy):
    """A user's strategy that no built-in is: fp16 on the first bucket, fp32 on the
    others."""

    name = "test-first-fp16"
    description = "fp16 on the first bucket, fp32 on the others"
    source = "tests"

    def build(self, cell: Any, profile: Any, costs: Any) -> list[Step]:
        buckets = fuse(profile, cell.fusion)
        fp16, fp32 = Option.parse("fp16 flat:ar"), Option.parse("flat:ar")
        return [Step(Plan(buckets, [fp16] + [fp32] * (len(buckets) - 1)), costs)]


@pytest.fixture
def user_strategy():
    strategies.register(FirstFp16)
    yield FirstFp16
    strategies.unregister(FirstFp16.name)


def test_a_users_strategy_validates_simulates_and_is_listed(user_strategy):
    from gcbench.backends.simulate import simulate_cell
    from gcbench.config.models import Cell

    base = {
        "model": {"name": "resnet50"},
        "compressor": "none",
        "network": {"inter_gbps": 10},
        "cluster": {"machines": 2, "gpus_per_machine": 4},
    }
    mine = simulate_cell(Cell.model_validate({**base, "strategy": "test-first-fp16"}))
    fp32 = simulate_cell(Cell.model_validate({**base, "strategy": "fp32"}))
    fp16 = simulate_cell(Cell.model_validate({**base, "strategy": "fp16"}))
    # one bucket in fp16 sends fewer bytes than fp32 and more than all of them in fp16
    assert fp16.metrics["wire_bytes"] < mine.metrics["wire_bytes"] < fp32.metrics["wire_bytes"]
    listed = json.loads(CliRunner().invoke(app, ["strategies", "--json"]).stdout)
    assert listed[-1]["name"] == "test-first-fp16" and listed[-1]["module"] == __name__


def test_an_unknown_strategy_names_the_closest():
    with pytest.raises(ConfigError) as info:
        strategies.get("bytecom")
    assert info.value.messages[0].startswith("unknown strategy 'bytecom'; did you mean 'bytecomp'?")


def test_strategies_lists_every_strategy_with_its_source():
    r = CliRunner().invoke(app, ["strategies", "--json"])
    assert r.exit_code == 0
    rows = json.loads(r.stdout)
    assert [row["name"] for row in rows] == strategies.names()
    assert all(row["source"] for row in rows)  # each says which paper and section
    covap = next(row for row in rows if row["name"] == "covap")
    assert covap["compressor"] == "own" and covap["own"] == "covap" and not covap["planner"]
    text = CliRunner().invoke(app, ["strategies"]).stdout
    assert "allgather-2level: HiTopKComm" in text and "alias hitopkcomm" in text


def test_emulation_asks_the_strategy_what_it_runs():
    covap, fp32 = strategies.get("covap"), strategies.get("fp32")
    options: list[Option | None] = [Option.parse("flat:ar"), None]
    assert covap.executed(options) == [Option.parse("gc flat:ar* gd")] * 2
    assert fp32.executed(options) == options
    spec = TypeAdapter(CompressorSpec).validate_python
    assert strategies.get("acpsgd").memory_kind(spec("acpsgd")) == "none"
    assert fp32.memory_kind(spec("dgc")) == "dgc" and fp32.memory_kind(spec("topk")) == "residual"
    # error feedback turned off in the spec: no memory, whatever the strategy keeps
    assert fp32.memory_kind(spec("dgc:ef=false")) == "none"
    assert fp32.memory_kind(spec("topk:ef=false")) == "none"


PLUGIN = '''
from gcbench.strategies import Strategy, register
from gcbench.strategies.baselines import Fp32


@register
class Plugged(Fp32):
    name = "test-plugged"
    description = "fp32, from an entry point"
    source = "tests"
'''


def test_entry_points_register_users_strategies(tmp_path, monkeypatch):
    import importlib.metadata as md

    from gcbench.strategies import base

    (tmp_path / "gcbench_test_plugin.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    good = md.EntryPoint("mine", "gcbench_test_plugin", base.ENTRY_POINTS)
    monkeypatch.setattr(md, "entry_points", lambda group: [good] if group == base.ENTRY_POINTS
                        else [])  # fmt: skip
    monkeypatch.setattr(base, "_loaded", False)
    monkeypatch.setattr(base, "_plugins", [])
    try:
        assert strategies.get("test-plugged").description == "fp32, from an entry point"
        assert strategies.plugins() == ["mine = gcbench_test_plugin"]
    finally:
        strategies.unregister("test-plugged")


def test_a_broken_entry_point_is_one_line_naming_it(tmp_path, monkeypatch):
    import importlib.metadata as md

    from gcbench.strategies import base

    bad = md.EntryPoint("broken", "gcbench_no_such_module", base.ENTRY_POINTS)
    monkeypatch.setattr(md, "entry_points", lambda group: [bad])
    monkeypatch.setattr(base, "_loaded", False)
    with pytest.raises(StrategyError) as info:
        strategies.names()
    assert str(info.value).startswith(
        "entry point 'broken' (gcbench_no_such_module) of gcbench.strategies: "
        "ModuleNotFoundError"
    )
