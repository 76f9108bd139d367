"""Chrome trace export (Trace Event Format, viewable in chrome://tracing or Perfetto).

One process per machine, one thread per worker stream, `M` events naming both, and one
complete (`X`) event per span, in microseconds. Streams serve one job at a time, so spans
on one thread never overlap.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gcbench.sim.trace import Span

STREAM_ORDER = ("compute", "pcie", "intra", "inter_tx", "inter_rx")
MAX_WORKERS = 64


def symmetric_spans(spans: list[Span], machines: int, gpus_per_machine: int) -> list[Span]:
    """Worker 0's spans copied to every GPU (data-parallel workers are symmetric), so a
    trace shows each machine; above `MAX_WORKERS` GPUs, the first GPU of each machine."""
    gpus = machines * gpus_per_machine
    workers = range(gpus) if gpus <= MAX_WORKERS else range(0, gpus, gpus_per_machine)
    return [replace(s, worker=w) for w in workers for s in spans]


def chrome_trace(spans: list[Span], gpus_per_machine: int = 1) -> dict[str, Any]:
    threads: dict[tuple[int, str], int] = {}
    events: list[dict[str, Any]] = []

    def sort_key(key: tuple[int, str]) -> tuple[int, int, str]:
        worker, stream = key
        base = stream.split(":")[0]
        rank = STREAM_ORDER.index(base) if base in STREAM_ORDER else len(STREAM_ORDER)
        return worker, rank, stream

    for key in sorted({(s.worker, s.stream) for s in spans}, key=sort_key):
        threads[key] = len(threads) + 1
    machines = sorted({w // max(gpus_per_machine, 1) for w, _ in threads})
    for m in machines:
        events.append(
            {
                "ph": "M",
                "name": "process_name",
                "pid": m,
                "tid": 0,
                "args": {"name": f"machine {m}"},
            }
        )
    for (worker, stream), tid in threads.items():
        pid = worker // max(gpus_per_machine, 1)
        label = f"gpu {worker} {stream}"
        events.append(
            {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": label}}
        )
        events.append(
            {
                "ph": "M",
                "name": "thread_sort_index",
                "pid": pid,
                "tid": tid,
                "args": {"sort_index": tid},
            }
        )
    for s in sorted(spans, key=lambda s: (s.start_s, s.stream)):
        if s.dur_s <= 0:
            continue
        tid = threads[(s.worker, s.stream)]
        event: dict[str, Any] = {
            "ph": "X",
            "name": s.name,
            "cat": s.kind,
            "pid": s.worker // max(gpus_per_machine, 1),
            "tid": tid,
            "ts": s.start_s * 1e6,
            "dur": s.dur_s * 1e6,
        }
        if s.bytes:
            event["args"] = {"bytes": s.bytes}
        events.append(event)
    return {"traceEvents": events, "displayTimeUnit": "ms"}
