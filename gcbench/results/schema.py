"""The Record: one stored row per cell and repetition, its columns and format version.

The simulator (and, later, emulation) produces the metric columns, the runner builds a
row with `record`, the store writes it, `load_results` and the report read it — all by
the names below. `FORMAT_VERSION` is stored in every row; it changes when a column's
meaning changes (adding a column does not change it). `docs/architecture.md` lists the
same metric columns (a test checks that they agree).

Format versions: 1 — first release (no `format_version` column); 2 — timeline v2: adds
`fusion`, `inter_comm_s`, `buckets`, `format_version`, and for CPU servers
`summation_gbs` and `server_gbps`; a comm span's and `wire_bytes`'s bytes are the mean
bytes one GPU sends; periodic strategies (acpsgd, covap) report the mean over a period.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

FORMAT_VERSION = 2

# The cell's flat config columns, as `Cell.flat()` gives them (a test checks the match).
CONFIG_COLUMNS: tuple[str, ...] = (
    "model",
    "batch_size",
    "seq_len",
    "precision",
    "profile",
    "compressor",
    "compressor_kind",
    "compressor_params",
    "strategy",
    "fusion",
    "machines",
    "gpus_per_machine",
    "gpus",
    "cpu_servers",
    "cpu_cores",
    "cpu_gbs",
    "summation_gbs",
    "intra",
    "intra_gbs",
    "intra_latency_us",
    "intra_efficiency",
    "inter_gbps",
    "inter_latency_us",
    "inter_efficiency",
    "nics_per_machine",
    "server_gbps",
    "network_profile",
    "compute_scale",
    "iteration_overhead_us",
    "bucket_overhead_us",
    "compute_jitter",
    "compute_contention",
    "collectives",
    "nccl_ll_bandwidth",
    "nccl_ll128_bandwidth",
    "inter_overrides",
    "device",
    "mode",
    "clock",
    "compute_time",
    "seed",
    "compressor_costs",
    "constraints",
    "dataset",
    "train_steps",
    "target",
)

# What a backend measures for one iteration (DESIGN §5 Metrics), with its meaning.
METRICS: dict[str, str] = {
    "iteration_s": "steady-state time from one iteration's start to the next's",
    "throughput": "samples (or tokens) per second over all GPUs",
    "scaling_factor": "throughput / (GPUs x single-GPU throughput)",
    "compute_s": "time the GPU runs forward, backward and update",
    "compress_exposed_s": "time nothing computes while (de)compression or a host copy runs",
    "comm_exposed_s": "the rest of the iteration: waiting on communication",
    "comm_total_s": "sum of communication job durations, overlapped or not",
    "compress_total_s": "sum of (de)compression job durations, overlapped or not",
    "inter_comm_s": "sum of the durations of communication that crosses machines",
    "wire_bytes": "mean bytes one GPU sends per iteration (all bytes on the wire / GPUs)",
    "bubbles_s": "idle time between consecutive transfers on the busiest link",
    "planner_s": "wall-clock seconds gcbench spent planning the cell",
    "plan_file": "a planner strategy's stored plan, relative to the run folder "
    "(plans/<cell-id>.json.gz); empty for other strategies",
    "sample_unit": "images or tokens",
    "tensors": "gradient tensors of the model",
    "buckets": "communication buckets after fusion (0 on one GPU)",
    "model_mib": "model size in MiB (fp32)",
    "agg_error": "emulate: ||aggregate - exact sum|| / ||exact sum||, the L2 norm over every "
    "gradient element of the aggregated gradient against the exact sum of every worker's, "
    "one iteration; 0 for lossless (empty when simulated)",
    "agg_error_steps": "emulate: the same for the sum of the aggregates over the emulated "
    "iterations, where error feedback pays back what compression dropped",
    "predicted_iteration_s": "measure: the simulator's iteration for the same cell",
    "predicted_compute_s": "measure: the simulator's compute_s for the same cell",
    "predicted_exposed_s": "measure: the simulator's exposed communication and compression",
    "iteration_spread": "measure: (slowest - fastest) / median of the timed iterations",
    "forward_s": "measure: the forward pass and loss (CUDA events on a GPU, else the clock)",
    "backward_s": "measure: backward with DDP's wait for the hooks' communication",
    "update_s": "measure: the optimizer step",
    "predicted_forward_s": "measure: the profile's forward for the same cell",
    "predicted_backward_s": "measure: the profile's backward compute",
    "predicted_update_s": "measure: the profile's update",
    "attempts": "emulate, measure: the runs the cell took on fresh actors (2+: an actor died)",
    "startup_s": "emulate, measure: seconds from creating the actors to all in their groups",
    "hardware": "measure: what the actors ran on (device, nodes)",
    "final_metric": "train: held-out accuracy after the last step",
    "final_loss": "train: held-out cross-entropy after the last step (empty: diverged)",
    "steps_to_target": "train: the first evaluated step at or above the target accuracy "
    "(empty: not reached)",
    "time_to_target_s": "train: steps_to_target x the measured median iteration",
    "projected_iteration_s": "train: the simulated iteration of the cell on the `project:` "
    "cluster",
    "projected_time_to_target_s": "train: steps_to_target x projected_iteration_s (the small "
    "task's steps: a proxy)",
    "curve_step": "train: the evaluated steps (a JSON list, as the two below)",
    "curve_loss": "train: the mean training loss over the ranks' batches at those steps",
    "curve_metric": "train: held-out accuracy at those steps",
}
METRIC_COLUMNS: tuple[str, ...] = tuple(METRICS)
# empty when simulated
EMULATE_METRICS: tuple[str, ...] = ("agg_error", "agg_error_steps", "attempts", "startup_s")
MEASURE_METRICS: tuple[str, ...] = (
    "predicted_iteration_s", "predicted_compute_s", "predicted_exposed_s", "iteration_spread",
    "forward_s", "backward_s", "update_s", "predicted_forward_s", "predicted_backward_s",
    "predicted_update_s", "hardware",
)  # fmt: skip
CURVES: tuple[str, ...] = ("curve_step", "curve_loss", "curve_metric")  # JSON lists
TRAIN_METRICS: tuple[str, ...] = ("final_metric", "final_loss", "steps_to_target",
                                   "time_to_target_s", "projected_iteration_s",
                                   "projected_time_to_target_s", *CURVES)

# Columns describing gcbench's own execution of a cell (set by the Ray task): with
# `run_id` and `planner_s` the only ones that may differ between two runs of a cell.
TASK_META_COLUMNS: tuple[str, ...] = ("run_started_at", "run_wall_s", "run_pid", "run_node")
RUN_COLUMNS: tuple[str, ...] = ("run_id", *TASK_META_COLUMNS, "planner_s")

COLUMNS: tuple[str, ...] = (
    "suite",
    "cell_id",
    *CONFIG_COLUMNS,
    "status",
    "error",
    *METRIC_COLUMNS,
    "repetition",
    "gcbench_version",
    "format_version",
    "run_id",
    *TASK_META_COLUMNS,
)
STATUSES = ("ok", "failed", "infeasible")
MAX_ERROR_CHARS = 2000  # a failed cell's error: its first line, cut to this
MAX_CELL_BYTES = 4 * 2**20  # a cell's rows in memory: more is not a cell gcbench wrote
# What every row holds, whatever gcbench version wrote it (later columns may be absent
# from older files), and the columns that hold numbers (or nothing) and are finite
REQUIRED_COLUMNS: tuple[str, ...] = (
    "suite", "cell_id", "model", "strategy", "machines", "gpus_per_machine", "status",
    "repetition",
    # what reports read of every row (each written since format 2, the oldest read):
    # without one, `report` was a KeyError
    "compressor_kind", "gpus", "intra", "inter_gbps", "device", "iteration_s", "throughput",
    "scaling_factor", "compute_s", "compress_exposed_s", "comm_exposed_s", "wire_bytes",
)  # fmt: skip
NUMERIC_COLUMNS: tuple[str, ...] = (
    "batch_size", "seq_len", "machines", "gpus_per_machine", "gpus", "cpu_servers",
    "cpu_cores", "cpu_gbs", "summation_gbs", "intra_gbs", "intra_latency_us", "intra_efficiency",
    "inter_gbps", "inter_latency_us", "inter_efficiency", "nics_per_machine", "server_gbps",
    "compute_scale", "iteration_overhead_us", "bucket_overhead_us", "compute_jitter",
    "compute_contention", "nccl_ll_bandwidth", "nccl_ll128_bandwidth", "seed",
    *(m for m in METRIC_COLUMNS if m not in ("plan_file", "sample_unit", "hardware", *CURVES)),
    "repetition", "format_version", "run_wall_s", "train_steps", "target",
)  # fmt: skip


def record(
    *,
    suite: str,
    cell_id: str,
    config: Mapping[str, Any],
    metrics: Mapping[str, Any],
    error: str | None,
    repetition: int,
    gcbench_version: str,
    run_id: str,
    meta: Mapping[str, Any],
) -> dict[str, Any]:
    """One row in `COLUMNS` order; a failed cell keeps its config and has no metrics. A
    cell that could not be placed (`InfeasibleError`, e.g. an emulated cell whose
    workers the Ray cluster no longer has room for) is `infeasible` rather than
    `failed`; both run again on the next `gcbench run`."""
    status = "ok" if error is None else "failed"
    if error is not None and error.startswith("InfeasibleError"):
        status = "infeasible"
    return {
        "suite": suite,
        "cell_id": cell_id,
        **{k: config.get(k) for k in CONFIG_COLUMNS},
        "status": status,
        "error": (error or "")[:MAX_ERROR_CHARS],
        **{k: metrics.get(k) for k in METRIC_COLUMNS},
        "repetition": repetition,
        "gcbench_version": gcbench_version,
        "format_version": FORMAT_VERSION,
        "run_id": run_id,
        **{k: meta.get(k) for k in TASK_META_COLUMNS},
    }
