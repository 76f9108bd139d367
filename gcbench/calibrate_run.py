"""`gcbench calibrate --from RUN`: a network profile fitted on the measured cells of a run
(issue #32), fitting on some cells and scoring the others.

A run of `mode: measure` (or `train`: its training steps) holds, per cell, the
iterations it timed. Its cells are rebuilt
from the run's suite file (`manifest.json`: the cells whose ids the results hold) and
split by id, alternately: the first, third, ... are fitted (`calibrate.fit`, each cell an
end-to-end point the simulator predicts with the parameters tried), the others scored.
Both errors are reported beside the default's (the cells' own network, nothing fitted),
so a fit that only memorises its points shows: the out-of-sample error is the one to
read. The profile written is usable in any suite (`network: {profile: FILE}`).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gcbench.calibrate import Measurement, fit
from gcbench.config.network_profile import NetworkProfile
from gcbench.errors import ConfigError


def _predict(cell: Any, values: dict[str, float]) -> float:
    """The simulator's iteration for a measured cell with `values` over its network."""
    from gcbench.backends.simulate import simulate_cell
    from gcbench.config.models import Network

    net = Network.model_validate({**cell.network.model_dump(exclude_none=True), **values})
    c = cell.model_copy(update={"mode": "simulate", "network": net})
    return float(simulate_cell(c).metrics["iteration_s"])


def measured_cells(run: Path) -> list[tuple[Any, float]]:
    """(cell, its median measured iteration) for every ok measured cell of `run` (a run
    folder, or a suite folder's latest run), rebuilt from the run's suite file, in the
    order of their ids."""
    from gcbench.config import expand, load_suite
    from gcbench.results.store import load_results, resolve_run

    try:  # a run folder, or a suite folder's latest run
        run = resolve_run(run)
    except ConfigError as e:
        raise ConfigError([f"--from {m}" for m in e.messages]) from None
    df = load_results(run)
    # a trained run's iterations are measured too (the training steps, evaluation aside)
    timed = df["mode"].isin(["measure", "train"]) if not df.empty else None
    ok = df[(df["status"] == "ok") & timed] if not df.empty else df
    if ok.empty:
        raise ConfigError([f"--from {run}: no measured cells (mode: measure or train, "
                           "status ok)"])  # fmt: skip
    named = json.loads((run / "manifest.json").read_text()).get("suite_file")
    if not named:
        raise ConfigError([f"--from {run}: its manifest names no suite file (a run started "
                           "from Python without suite_file=): its cells cannot be rebuilt"])
    suite_file = Path(named)
    cells = {c.id: c for c in expand(load_suite(suite_file))}
    times = ok.groupby("cell_id")["iteration_s"].median()
    found = sorted((i, float(t)) for i, t in times.items() if i in cells)
    if len(found) < 2:
        raise ConfigError(
            [f"--from {run}: {len(found)} of its {len(times)} measured cells are in "
             f"{suite_file} as it is now (2 or more needed: one to fit, one to score)"]
        )  # fmt: skip
    return [(cells[i], t) for i, t in found]


def predictor(cell: Any) -> Callable[[dict[str, Any], dict[str, float]], float]:
    """A cell as `calibrate.fit` reads an end-to-end point: values -> seconds."""
    return lambda _net, values: _predict(cell, values)


def _errors(pairs: list[tuple[Any, float]], values: dict[str, float]) -> list[float]:
    return [_predict(c, values) / t - 1 for c, t in pairs]


def from_run(run: Path, params: list[str]) -> tuple[NetworkProfile, dict[str, Any]]:
    """The fitted profile, and what `calibrate --from` prints: per split (fitted on,
    scored on) the median |error| with the default network and with the fit."""
    pairs = measured_cells(run)
    fitted_on, scored_on = pairs[0::2], pairs[1::2]
    ms = [Measurement(f"{c.model.name} {c.strategy} {c.compressor.label()} "
                      f"{c.cluster.machines}x{c.cluster.gpus_per_machine}", t,
                      custom=predictor(c))
          for c, t in fitted_on]  # fmt: skip
    net = fitted_on[0][0].network.model_dump(exclude_none=True)
    result = fit(ms, net, params)
    values = {k: float(f"{v:.6g}") for k, v in result.values.items()}

    def median(errors: list[float]) -> float:
        return statistics.median(abs(e) for e in errors)

    report = {
        "fitted_on": len(fitted_on), "scored_on": len(scored_on), "parameters": values,
        "in_sample": {"default": median(_errors(fitted_on, {})),
                      "fitted": median(_errors(fitted_on, values))},
        "out_of_sample": {"default": median(_errors(scored_on, {})),
                          "fitted": median(_errors(scored_on, values))},
    }  # fmt: skip
    keep = {k: v for k, v in net.items() if k not in ("compute_scale", "overrides", "profile",
                                                     "profile_sha256")}  # fmt: skip
    profile = NetworkProfile(
        name=f"{run.parent.name}-{run.name}",
        source=f"gcbench calibrate --from {run}: {', '.join(params)} fitted to "
        f"{len(fitted_on)} measured cells, scored on {len(scored_on)}",
        network={**keep, **{k: v for k, v in values.items() if k != "compute_scale"}},
        compute_scale=values.get("compute_scale", float(net.get("compute_scale", 1.0))),
        fit={**report, "method": result.method, "bound_hits": result.bound_hits},
    )
    return profile, report
