"""Chrome trace export (Trace Event Format, viewable in chrome://tracing or Perfetto).

One process per machine, one thread per worker stream, `M` events naming both, and one
complete (`X`) event per span, in microseconds. Streams serve one job at a time, so spans
on one thread never overlap.

Data-parallel workers are symmetric: the simulator times worker 0 alone (its cost does
not grow with the cluster) and a trace copies its spans to the workers it shows. Up to
`MAX_WORKERS` GPUs it shows every one; above that, *representative* workers only — at
most `SHOWN_MACHINES` machines (the first and the last ones) and `SHOWN_GPUS` GPUs of
each — so a trace stays bounded (a few MB) whatever the cluster. Such a trace says so:
each process carries a `process_labels` metadata event ("1 of N identical machines"), and
the top-level `otherData` holds the cluster's size, the machines and GPUs shown, and a
note.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gcbench.sim.trace import Span

STREAM_ORDER = ("compute", "pcie", "intra", "inter_tx", "inter_rx")
MAX_WORKERS = 64  # every GPU of a cluster this small is shown
SHOWN_MACHINES = 4  # above it: at most this many machines ...
SHOWN_GPUS = 8  # ... and this many GPUs of each


def _representatives(n: int, k: int) -> list[int]:
    """All of 0..n-1 when n <= k, else the first k - k // 2 and the last k // 2."""
    if n <= k:
        return list(range(n))
    return list(range(k - k // 2)) + list(range(n - k // 2, n))


def shown(machines: int, gpus_per_machine: int) -> tuple[list[int], list[int]]:
    """The machines a trace shows and the GPUs (local ranks) it shows of each."""
    if machines * gpus_per_machine <= MAX_WORKERS:
        return list(range(machines)), list(range(gpus_per_machine))
    return (
        _representatives(machines, SHOWN_MACHINES),
        _representatives(gpus_per_machine, SHOWN_GPUS),
    )


def shown_note(machines: int, gpus_per_machine: int) -> str | None:
    """One line saying which workers a trace of this cluster shows, or None when it shows
    every GPU."""
    ms, gs = shown(machines, gpus_per_machine)
    if len(ms) == machines and len(gs) == gpus_per_machine:
        return None
    gpus = (
        f"all {gpus_per_machine} GPUs of each"
        if len(gs) == gpus_per_machine
        else f"GPUs {_listing(gs)} of {gpus_per_machine} on each"
    )
    return (
        f"representative workers only: machines {_listing(ms)} of {machines:,}, {gpus} "
        "(data-parallel workers are identical)"
    )


def _listing(values: list[int]) -> str:
    return ", ".join(str(v) for v in values)


def symmetric_spans(spans: list[Span], machines: int, gpus_per_machine: int) -> list[Span]:
    """Worker 0's spans copied to the workers a trace shows (`shown`): every GPU up to
    `MAX_WORKERS` GPUs, else representative ones; the result is bounded by
    SHOWN_MACHINES × SHOWN_GPUS × len(spans) whatever the cluster."""
    ms, gs = shown(machines, gpus_per_machine)
    workers = [m * gpus_per_machine + g for m in ms for g in gs]
    return [replace(s, worker=w) for w in workers for s in spans]


def chrome_trace(
    spans: list[Span], gpus_per_machine: int = 1, machines: int | None = None
) -> dict[str, Any]:
    """The Trace Event Format object of `spans` (machine = worker // gpus_per_machine).
    With `machines` (the cluster's size), a trace of representative workers says so in
    `process_labels` events and `otherData`."""
    per = max(gpus_per_machine, 1)
    threads: dict[tuple[int, str], int] = {}
    events: list[dict[str, Any]] = []

    def sort_key(key: tuple[int, str]) -> tuple[int, int, str]:
        worker, stream = key
        base = stream.split(":")[0]
        rank = STREAM_ORDER.index(base) if base in STREAM_ORDER else len(STREAM_ORDER)
        return worker, rank, stream

    for key in sorted({(s.worker, s.stream) for s in spans}, key=sort_key):
        threads[key] = len(threads) + 1
    present = sorted({w // per for w, _ in threads})
    note = shown_note(machines, per) if machines is not None else None
    for m in present:
        meta = {"process_name": {"name": f"machine {m}"}, "process_sort_index": {"sort_index": m}}
        if note is not None:
            meta["process_labels"] = {
                "labels": f"1 of {machines:,} identical machines ({len(present)} shown)"
            }
        for what, args in meta.items():
            events.append({"ph": "M", "name": what, "pid": m, "tid": 0, "args": args})
    for (worker, stream), tid in threads.items():
        pid = worker // per
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
            "pid": s.worker // per,
            "tid": tid,
            "ts": s.start_s * 1e6,
            "dur": s.dur_s * 1e6,
        }
        if s.bytes:
            event["args"] = {"bytes": s.bytes}
        events.append(event)
    out: dict[str, Any] = {"traceEvents": events, "displayTimeUnit": "ms"}
    if machines is not None:
        ms, gs = shown(machines, per)
        out["otherData"] = {
            "machines": machines,
            "gpus_per_machine": per,
            "shown_machines": ms,
            "shown_gpus": gs,
            "representative": note is not None,
            "note": note or "every GPU is shown",
        }
    return out
