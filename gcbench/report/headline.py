"""The answer first: per scenario of a run (a model on one cluster, network and device),
which strategy wins, by how much, against what (issue #36).

A scenario is every config column but the choices a user makes between strategies
(`CHOICES`: the strategy, its compressor, fusion, the planner's constraints, the CPU
summation servers a parameter-server strategy brings). In each: the winner (the fastest
ok cell of a strategy one can run: not a bound such as `upper-bound`), its speed-up over
the **best baseline without gradient compression** the grid has (`BASELINES`: fp32,
fp32-2level, ps and byteps with no compressor; named), over fp32 and beside it fp16's
cast (the simplest compression), and the runner-up (the fastest of another strategy, not
on the winner's plan) with its gap: a gap under `TIE` is a tie.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from gcbench.report.choices import BASELINES, SCENARIO, TIE, choice_label, plain, runnable
from gcbench.report.labels import DERIVED, applies, describe, number_text, per_cell, value_text

SAME = 1e-9  # two times closer than this are one plan's, not two answers
__all__ = ["BASELINES", "TIE", "choice_label", "headline", "headline_html", "headline_lines",
           "runnable"]  # fmt: skip


# What `_where` says of a scenario.
WHERE = ("machines", "gpus_per_machine", "device", "intra", "inter_gbps")


def _where(row: dict[str, Any]) -> str:
    """`8×8 v100 nvlink at 100 Gbps`."""
    m, g = number_text(row["machines"]), number_text(row["gpus_per_machine"])
    return f"{m}×{g} {row['device']} {row['intra']} at {number_text(row['inter_gbps'])} Gbps"


def headline(df: pd.DataFrame, rows: pd.DataFrame | None = None) -> list[dict[str, Any]]:
    """One entry per scenario with at least one ok cell, in the results' order: the
    scenario's columns that vary across the run (`scenario`), the winner and its time,
    the best uncompressed baseline, fp32 and fp16 where the grid has them, the runner-up,
    the speed-ups, the tie flag and a sentence. Times are the mean over repetitions.
    `rows`: the results' rows, one per repetition, where `df` is their `per_cell` (a
    trained run is ranked on every seed's)."""
    cells = per_cell(df)
    if cells.empty or "iteration_s" not in cells.columns:
        return []
    cells = cells[[runnable(s) for s in cells["strategy"]]]
    what = ""
    if "final_metric" in cells.columns and cells["final_metric"].notna().any():
        cells, what = _to_target(df if rows is None else rows, cells)
    cols = [c for c in SCENARIO if c in cells.columns]

    def scenario_of(frame: pd.DataFrame) -> pd.Series:
        keyed = frame[cols].astype(object).where(frame[cols].notna(), None).astype(str)
        return keyed.apply(tuple, axis=1)

    # cells of a scenario that did not finish: the winner is among those that did only
    unfinished: dict[tuple, int] = {}
    every = df if rows is None else rows  # `per_cell` keeps only finished cells
    if "status" in every.columns and set(cols) <= set(every.columns):
        bad = every[every["status"] != "ok"].drop_duplicates("cell_id")
        bad = bad[[runnable(x) for x in bad["strategy"]]]
        if not bad.empty:
            unfinished = scenario_of(bad).value_counts().to_dict()
    out = []
    for key, group in cells.groupby(scenario_of(cells), sort=False):
        # equal times (two strategies, one plan) go by cell id: the same answer whatever
        # the order the results were read in
        ranked = sorted(group.to_dict("records"), key=lambda r: (r["iteration_s"], r["cell_id"]))
        entry = _entry(ranked, what)
        if unfinished.get(key):
            n = unfinished[key]
            entry["sentence"] += (f" {n} other cell{'s' * (n != 1)} of this scenario did "
                                  "not finish and {} not ranked.".format("are" if n != 1 else "is"))
            entry["unfinished"] = n
        out.append(entry)
    # shown: the columns that vary across the run, less those that follow from others
    # (the GPUs from the cluster, a model's batch and sequence length from the model)
    varying = [c for c in cols if c not in DERIVED and cells[c].astype(str).nunique() > 1]
    varying = [c for c in varying if c == "model"
               or cells.groupby("model")[c].nunique(dropna=False).max() > 1]  # fmt: skip
    # the sentence names what else tells its scenario from the others (`On 8×8 v100
    # nvlink at 25 Gbps (collectives as nccl),`): else two scenarios read the same
    extra = [c for c in varying if c not in WHERE and c != "model"]
    for entry in out:
        scenario = entry["scenario"]
        if extra:
            where = _where(scenario)
            also = ", ".join(describe(c, scenario[c], scenario) for c in extra
                             if applies(c, scenario))
            sentence = entry["sentence"]
            entry["sentence"] = sentence.replace(f"On {where},", f"On {where} ({also}),", 1)
        entry["scenario"] = {c: scenario[c] for c in varying}
    return out


def _to_target(df: pd.DataFrame, cells: pd.DataFrame) -> tuple[pd.DataFrame, str]:
    """A trained run (`mode: train`) ranks its cells by the time to the target accuracy
    on the report's clock (projected where the suite names a cluster, else measured;
    `report.training`), among the cells every seed of which reached it: their
    `iteration_s` replaced by that time; with no target, by the iteration among the cells
    that lose no accuracy to fp32 (`accuracy_table`'s verdict). The phrase the sentences
    use."""
    from gcbench.report.training import accuracy_table, projected

    ok = df[df["status"] == "ok"]
    word = "projected" if projected(df) else "measured"
    clock = "projected_iteration_s" if word == "projected" else "iteration_s"
    if "target" not in ok or not ok["target"].notna().any():
        table = accuracy_table(df).set_index("cell_id")
        kept = table.index[[not v.startswith("-") for v in table["verdict"]]]
        reached = cells[cells["cell_id"].isin(kept)].copy()
        reached["iteration_s"] = reached["cell_id"].map(ok.groupby("cell_id")[clock].mean())
        return reached, f"is fastest with no accuracy lost to fp32 ({word} time)"
    times = ok.groupby("cell_id")["steps_to_target"].agg(lambda s: s.mean() if s.notna().all()
                                                         else None)  # fmt: skip
    per = ok.groupby("cell_id")[clock].mean()
    reached = cells[cells["cell_id"].map(times).notna()].copy()
    reached["iteration_s"] = reached["cell_id"].map(times * per)
    target = float(ok["target"].dropna().iloc[0]) if ok["target"].notna().any() else None
    name = "the target" if target is None else f"{target:.0%} accuracy"
    return reached, f"reaches {name} first ({word} time, every seed)"


def _entry(rows: list[dict[str, Any]], what: str = "") -> dict[str, Any]:
    win = rows[0]
    t = float(win["iteration_s"])

    def best(where: Any) -> dict[str, Any] | None:
        found = [r for r in rows if where(r)]
        return found[0] if found else None

    base = best(lambda r: r["strategy"] in BASELINES and r.get("compressor_kind") == "none")
    fp32 = best(lambda r: r["strategy"] == "fp32" and r.get("compressor_kind") == "none")
    fp16 = best(lambda r: r["strategy"] == "fp16")
    # the runner-up: the fastest of another strategy (the same one with another
    # compressor is a variant of the winner, not a rival) whose time is not the winner's
    # to the last digits (bytecomp and bytecomp-greedy on one plan are one answer)
    second = best(lambda r: r["strategy"] != win["strategy"]
                  and abs(float(r["iteration_s"]) / t - 1) > SAME)  # fmt: skip
    gap = None if second is None else float(second["iteration_s"]) / t - 1

    def times(r: dict[str, Any] | None) -> tuple[str | None, float | None, float | None]:
        if r is None:
            return None, None, None
        s = float(r["iteration_s"])
        return choice_label(r), s, s / t

    b_name, b_s, b_x = times(base)
    f_name, f_s, f_x = times(fp32)
    h_name, h_s, h_x = times(fp16)
    r_name, r_s, _ = times(second)
    winner = choice_label(win)
    over = []
    if b_name is not None:
        over.append(f"{b_x:.2f}× over {b_name}")
    if f_name is not None and f_name != b_name:
        over.append(f"{f_x:.2f}× over fp32")
    done = f"{what} for" if what else "is fastest for"
    sentence = f"On {_where(win)}, {winner} {done} {win['model']}"
    if winner == b_name:
        sentence += " (no compression wins)"
    sentence += (": " + ", ".join(over) if over and winner != b_name else "") + "."
    if gap is not None and gap < TIE:
        sentence += f" {r_name} is within {gap:.1%}: a tie at gcbench's accuracy."
    return {
        "scenario": {c: plain(win.get(c)) for c in SCENARIO if c in win},
        "model": plain(win["model"]),
        "winner": winner,
        "winner_cell": plain(win["cell_id"]),
        "winner_s": t,
        "baseline": b_name,
        "baseline_s": b_s,
        "speedup_over_baseline": b_x,
        "fp32_s": f_s,
        "speedup_over_fp32": f_x,
        "fp16": h_name,
        "fp16_s": h_s,
        "speedup_over_fp16": h_x,
        "runner_up": r_name,
        "runner_up_s": r_s,
        "gap": gap,
        "tie": gap is not None and gap < TIE,
        "sentence": sentence,
        "ranked_by": what or "iteration",
    }


def _times(x: float | None) -> str:
    return "" if x is None else f"{x:.2f}×"


def headline_html(entries: list[dict[str, Any]]) -> str:
    """The run page's first table: one row per scenario (its varying columns), the winner
    and its time, the speed-ups over the best baseline (named), fp32 and fp16, and the
    runner-up with its gap; the sentence of a row in its title."""
    import html

    if not entries:
        return ""
    cols = list(entries[0]["scenario"])
    texts = ("winner", "baseline", "runner-up")
    head = "".join(f'<th class="text">{html.escape(c)}</th>' for c in cols) + "".join(
        f'<th{" class=text" if h in texts else ""}>{h}</th>'
        for h in ("winner", "ms", "× best baseline", "baseline", "× fp32", "× fp16",
                  "runner-up", "gap")
    )  # fmt: skip
    rows = []
    for e in entries:
        values = [html.escape(value_text(e["scenario"][c])) for c in cols]
        tie = ' class="tie" title="within gcbench\'s accuracy: a tie"' if e["tie"] else ""
        gap = "" if e["gap"] is None else f"{e['gap']:+.1%}"
        cells = "".join(f'<td class="text">{v}</td>' for v in values) + (
            f'<td class="text winner">{html.escape(e["winner"])}</td>'
            f'<td>{e["winner_s"] * 1e3:.2f}</td>'
            f'<td>{_times(e["speedup_over_baseline"])}</td>'
            f'<td class="text">{html.escape(e["baseline"] or "none in the grid")}</td>'
            f'<td>{_times(e["speedup_over_fp32"])}</td>'
            f'<td>{_times(e["speedup_over_fp16"])}</td>'
            f'<td class="text">{html.escape(e["runner_up"] or "")}</td>'
            f"<td{tie}>{gap}</td>"
        )
        rows.append(f'<tr title="{html.escape(e["sentence"])}">{cells}</tr>')
    ranked = entries[0].get("ranked_by", "iteration")
    fastest = ("the fastest strategy one can run" if ranked == "iteration"
               else f"the strategy that {ranked}; ms: its time to the target" if "first" in
               ranked else f"the strategy that {ranked}")  # fmt: skip
    return (
        '<h2 id="headline-h">Which strategy wins</h2>'
        f'<p class="meta">Per scenario, {html.escape(fastest)}; × is its speed-up '
        "over the best strategy in the grid without gradient compression (named), over "
        f"fp32 and over fp16's cast; a gap under {TIE:.0%} (gcbench's error against the "
        "papers' figures) is a tie. Times are simulated, emulated or measured, as the run "
        "says.</p>"
        f'<table id="headline"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}'
        "</tbody></table>"
    )


def headline_lines(entries: list[dict[str, Any]], most: int = 8) -> list[str]:
    """The headline for a terminal: up to `most` sentences, the largest speed-ups over the
    baseline first, and how many more the page has."""
    ranked = sorted(entries, key=lambda e: -(e["speedup_over_baseline"] or 0.0))
    lines = [e["sentence"] for e in ranked[:most]]
    if len(entries) > most:
        lines.append(f"… {len(entries) - most} more scenarios in the report's headline")
    return lines
