"""The answer first (issue #36): per scenario, the winner, the best baseline without
gradient compression and the speed-up over it, computed here from the results and
compared with `report.headline`, never with pinned numbers."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from test_report_pages import grid_cell
from test_results import cell_rows

from gcbench.config import expand, load_suite
from gcbench.report.headline import BASELINES, TIE, choice_label, headline

from conftest import ROOT

CHOICES = [("fp32", "none"), ("fp32-2level", "none"), ("fp16", "none"),
           ("allgather", "dgc-1pct"), ("allreduce", "randomk-1pct"),
           ("upper-bound", "dgc-1pct")]  # fmt: skip


@pytest.fixture(scope="module")
def frame() -> pd.DataFrame:
    """tiny-cnn on 1 and 2 machines of 4 GPUs at 10 Gbps, six strategies (one a bound)."""
    rows = []
    for machines in (1, 2):
        for s, c in CHOICES:
            rows += cell_rows(grid_cell(s, c, machines, 10.0, "tiny-cnn"), repetitions=1)
    return pd.DataFrame(rows)


def expected(cells: pd.DataFrame) -> dict:
    ok = cells[(cells["status"] == "ok") & (cells["strategy"] != "upper-bound")]
    ok = ok.sort_values(["iteration_s", "cell_id"])
    win = ok.iloc[0]
    base = ok[ok["strategy"].isin(BASELINES) & (ok["compressor_kind"] == "none")].iloc[0]
    other = ok[(ok["strategy"] != win["strategy"])
               & ((ok["iteration_s"] / win["iteration_s"] - 1).abs() > 1e-9)].iloc[0]  # fmt: skip
    return {"win": win, "base": base, "other": other}


def test_each_scenario_names_its_winner_baseline_and_runner_up(frame):
    got = {e["scenario"]["machines"]: e for e in headline(frame)}
    assert set(got) == {1, 2}
    for machines, e in got.items():
        x = expected(frame[frame["machines"] == machines])
        win, base, other = x["win"], x["base"], x["other"]
        assert e["winner_cell"] == win["cell_id"] and e["winner"] == choice_label(win)
        assert e["winner_s"] == pytest.approx(win["iteration_s"])
        assert e["baseline"] == choice_label(base)
        assert e["speedup_over_baseline"] == pytest.approx(base["iteration_s"] / win["iteration_s"])
        assert e["runner_up"] == choice_label(other)
        gap = other["iteration_s"] / win["iteration_s"] - 1
        assert e["gap"] == pytest.approx(gap) and e["tie"] == (gap < TIE)
        assert e["winner"] in e["sentence"] and "upper-bound" not in e["sentence"]
        if e["winner"] != e["baseline"]:
            assert f"{e['speedup_over_baseline']:.2f}× over {e['baseline']}" in e["sentence"]
    json.dumps(list(got.values()))  # what `report --json` prints and headline.json holds


def test_a_bound_never_wins_and_a_grid_without_baselines_says_so(frame):
    """upper-bound is faster than every strategy one can run (compression is free in it),
    yet never the winner; without fp32 or fp32-2level in the grid there is no baseline."""
    bound = frame[frame["strategy"] == "upper-bound"]["iteration_s"].min()
    runnable = frame[frame["strategy"] != "upper-bound"]["iteration_s"].min()
    assert bound <= runnable
    assert all(e["winner"] != "upper-bound" for e in headline(frame))
    no_base = frame[~frame["strategy"].isin(BASELINES)]
    for e in headline(no_base):
        assert e["baseline"] is None and e["speedup_over_baseline"] is None
    assert headline(frame[frame["status"] == "nothing"]) == []


@pytest.mark.slow
def test_nvlink100_bert_base_squad_8x8_names_the_best_baseline():
    """Issue #36's case: on nvlink100, bert-base-squad on 8x8 — the best baseline (of
    fp32, fp32-2level, ps, byteps with servers) and the winner's speed-up over it, from
    the cells simulated here."""
    suite = load_suite(ROOT / "suites/nvlink100.yaml")
    cells = [c for c in expand(suite) if c.model.name == "bert-base-squad"
             and c.cluster.machines == 8]  # fmt: skip
    rows = [r for c in cells for r in cell_rows(c, "nvlink100", "r", 1)]
    frame = pd.DataFrame(rows)
    (entry,) = headline(frame)
    x = expected(frame)
    assert entry["baseline"] == choice_label(x["base"])
    assert entry["speedup_over_baseline"] == pytest.approx(
        x["base"]["iteration_s"] / x["win"]["iteration_s"]
    )
    assert entry["winner"] == choice_label(x["win"]) and entry["speedup_over_baseline"] > 1
    assert f"over {entry['baseline']}" in entry["sentence"]


def test_the_speedup_heatmap_is_over_the_best_baseline_too(frame):
    """The report's heatmap and the headline agree on the baseline: per scenario the
    fastest of fp32 and fp32-2level here, named, and each compressor's best strategy
    (never the upper bound) over it."""
    from gcbench.report.figures import speedup_table

    table = speedup_table(frame)
    assert not table.empty and "upper-bound" not in set(table["best"])
    for r in table.to_dict("records"):
        mine = frame[frame["machines"] == r["machines"]]
        x = expected(mine)
        assert r["baseline"] == choice_label(x["base"])
        runs = mine[(mine["compressor"] == r["compressor"]) & (mine["strategy"] != "upper-bound")]
        assert r["speedup"] == pytest.approx(x["base"]["iteration_s"] / runs["iteration_s"].min())


def test_scaling_shows_the_fastest_lines_first_the_rest_a_click_away(frame):
    """Issue #36: a scaling panel draws its TOP_LINES lines of the highest throughput at
    its most GPUs; the others are in the legend only (a click shows them)."""
    from gcbench.report.figures import TOP_LINES, scaling_figure

    fig = scaling_figure(frame)
    lines = [t for t in fig.data if t.name != "linear scaling" and t.xaxis == "x"]
    assert len(lines) == len(CHOICES) > TOP_LINES
    shown = [t for t in lines if t.visible is True]
    hidden = [t for t in lines if t.visible == "legendonly"]
    assert len(shown) == TOP_LINES and len(hidden) == len(lines) - TOP_LINES
    assert min(t.y[-1] for t in shown) >= max(t.y[-1] for t in hidden)
    assert len({(t.line.color, t.line.dash) for t in lines}) == len(lines)


def test_scenarios_that_differ_beyond_the_cluster_say_how_in_their_sentence(frame):
    """Two networks alike but in their collective model: each sentence names its own, so
    the two lines never read the same."""
    other = frame.copy()
    other["collectives"] = "nccl"
    other["cell_id"] = other["cell_id"] + "-nccl"
    both = pd.concat([frame.assign(collectives="ring"), other])
    sentences = [e["sentence"] for e in headline(both)]
    assert len(sentences) == 4 == len(set(sentences))
    assert sum("(collectives as nccl)," in s for s in sentences) == 2
    assert all("(" not in e["sentence"].split(",")[0] for e in headline(frame))


def test_a_scenario_with_cells_that_did_not_finish_says_so(frame):
    """Every compressed cell failed: the headline said "fp32 is fastest (no compression
    wins)" with no word of them (a review, 2026-11-29); it ranks the finished cells and
    says how many others did not finish."""
    df = frame.copy()
    dead = (df["machines"] == 2) & ~df["strategy"].isin(["fp32", "fp32-2level", "fp16"])
    df.loc[dead, "status"] = "failed"
    df.loc[dead, ["iteration_s", "throughput"]] = None
    got = {e["scenario"]["machines"]: e for e in headline(df, df)}
    n = int(df[dead & (df["strategy"] != "upper-bound")]["cell_id"].nunique())
    assert got[2]["unfinished"] == n == 2
    assert f"{n} other cells of this scenario did not finish" in got[2]["sentence"]
    assert "unfinished" not in got[1] and "did not finish" not in got[1]["sentence"]
