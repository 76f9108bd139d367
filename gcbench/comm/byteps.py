"""Parameter server push+pull and BytePS's partition between PS and allreduce (DESIGN §7).

**PS push+pull** (n GPU workers, k summation servers). A tensor of S bytes is cut into
4,096,000-byte partitions (BytePS's default `BYTEPS_PARTITION_BYTES`; the last one is
smaller) dealt round-robin to the servers, so the busiest server holds L >= S/k bytes.
Each way, the worker's NIC moves S bytes and the busiest server's NIC n*L bytes:

    push = pull = max(S / (eta_w B_w), n*L / (eta_s B_s))

and, when a summation throughput R (input bytes per second per server) is given, the
busiest server needs n*L / R to sum what it receives. The three stages (push, sum, pull)
are pipelined over the partitions: push uses the workers' send and the servers' receive
directions, pull the opposite ones, so on full-duplex NICs the pull of a summed partition
runs while later partitions are still being pushed. The time is the bottleneck stage's
total plus, for the last partition, the stages other than the bottleneck (the pipeline's
fill; `pipeline_fill=False` drops it, leaving the steady-state bound of DESIGN §7), plus
one latency each way. A tensor of one partition is pushed, summed and pulled in series.

**BytePS** (BytePS slides, "Best partition strategy"), n GPU machines and
k CPU machines, all with NIC bandwidth B: a fraction x of each machine's S bytes goes
PS-style through the CPU machines and y = 1 - x is allreduced among the GPU machines.
A GPU machine then moves (2(n-1)/n * y + x) * S, a CPU machine n*x*S/k; balancing the two
gives

    x = 2k(n-1) / (n^2 + kn - 2k),   y = n(n-k) / (n^2 + kn - 2k),
    t = 2n(n-1) * S / ((n^2 + kn - 2k) * eta B).

k = 0 is the ring allreduce's bandwidth term 2(n-1)/n * S/(eta B); k = n is PS, S/(eta B).
More CPU machines than GPU machines do not help (the GPU machines' NICs already carry
only S each way), so k is capped at n. Like the paper, this ignores partition
granularity and pipeline fill.
"""

from __future__ import annotations

import math

from gcbench.comm.collectives import Link

PARTITION_BYTES = 4_096_000  # BytePS default partition size (DESIGN §5)


def partitions(nbytes: float, partition_bytes: float = PARTITION_BYTES) -> list[float]:
    """Sizes of the partitions of an S-byte tensor: full ones, then the remainder."""
    if nbytes <= 0:
        return []
    if partition_bytes <= 0:
        raise ValueError(f"partition_bytes must be > 0, got {partition_bytes}")
    full = math.floor(nbytes / partition_bytes)
    rest = nbytes - full * partition_bytes
    return [float(partition_bytes)] * full + ([rest] if rest > 0 else [])


def server_loads(
    nbytes: float, servers: int, partition_bytes: float = PARTITION_BYTES
) -> list[float]:
    """Bytes each of `servers` servers holds when partitions are dealt round-robin."""
    if servers < 1:
        raise ValueError(f"servers must be >= 1, got {servers}")
    loads = [0.0] * servers
    for i, size in enumerate(partitions(nbytes, partition_bytes)):
        loads[i % servers] += size
    return loads


def ps_pushpull_s(
    nbytes: float,
    workers: int,
    servers: int,
    link: Link,
    server_link: Link | None = None,
    *,
    summation_Bps: float | None = None,
    partition_bytes: float = PARTITION_BYTES,
    pipeline_fill: bool = True,
    server_work_s: float = 0.0,
) -> float:
    """Push S bytes from each of `workers` workers to `servers` servers, sum, pull back.

    `link` is a worker's NIC, `server_link` a server's (default: the same). See the module
    docstring for the model; the latency is one hop each way at the larger of the two.
    `server_work_s` is other work the busiest server does on what it receives (BytePS-
    Compress: decompress the pushed payloads, recompress the sum), pipelined over the
    partitions like the summation.
    """
    if servers < 1:
        raise ValueError(f"a PS needs servers >= 1, got {servers}")
    if summation_Bps is not None and summation_Bps <= 0:
        raise ValueError(f"summation_Bps must be > 0, got {summation_Bps}")
    if nbytes <= 0 or workers < 1:
        return 0.0
    srv = server_link if server_link is not None else link
    n = workers

    def stages(worker_bytes: float, server_bytes: float) -> tuple[float, float, float]:
        move = max(worker_bytes / link.effective_Bps, n * server_bytes / srv.effective_Bps)
        add = 0.0 if summation_Bps is None else n * server_bytes / summation_Bps
        add += server_work_s * server_bytes / busiest  # the work follows the bytes
        return move, add, move  # push, sum, pull

    busiest = max(server_loads(nbytes, servers, partition_bytes))

    totals = stages(nbytes, busiest)
    t = max(totals)
    if pipeline_fill:
        last = partitions(nbytes, partition_bytes)[-1]
        per_piece = stages(last, last)
        bottleneck = totals.index(t)
        t += sum(p for i, p in enumerate(per_piece) if i != bottleneck)
    return t + 2 * max(link.latency_s, srv.latency_s)


def ps_wire_bytes(nbytes: float, workers: int) -> float:
    """Bytes one worker sends in a push+pull: its whole tensor, S (and it receives S)."""
    return nbytes if workers >= 1 and nbytes > 0 else 0.0


def _check(n: int, k: int) -> None:
    if n < 1 or k < 0:
        raise ValueError(f"BytePS needs n >= 1 GPU machines and k >= 0 CPU machines, got {n}, {k}")


def byteps_partition(n: int, k: int) -> tuple[float, float]:
    """(x, y): fractions of each GPU machine's traffic sent through the k CPU machines and
    allreduced among the n GPU machines (BytePS slides); x + y = 1. k is capped at n."""
    _check(n, k)
    if n == 1:
        return 0.0, 1.0  # one machine: nothing to exchange
    k = min(k, n)
    d = n * n + k * n - 2 * k
    return 2 * k * (n - 1) / d, n * (n - k) / d


def byteps_s(
    nbytes: float, n: int, k: int, link: Link, *, summation_Bps: float | None = None
) -> float:
    """BytePS communication time with n GPU machines and k CPU machines on NICs `link`:
    2n(n-1) S / ((n^2+kn-2k) eta B), at least the CPU machines' summation time n*x*S/(k R)
    when a summation throughput R is given, plus latency: 2(n-1) steps for the allreduce
    part (y > 0), one hop each way for the PS part (x > 0), which run side by side."""
    _check(n, k)
    if nbytes <= 0 or n <= 1:
        return 0.0
    k = min(k, n)
    x, y = byteps_partition(n, k)
    t = 2 * n * (n - 1) * nbytes / ((n * n + k * n - 2 * k) * link.effective_Bps)
    if summation_Bps is not None and k > 0:
        t = max(t, n * x * nbytes / (k * summation_Bps))
    steps = max(2 * (n - 1) if y > 0 else 0, 2 if x > 0 else 0)
    return t + steps * link.latency_s


def byteps_machine_traffic(nbytes: float, n: int, k: int) -> tuple[float, float]:
    """Bytes each way through (a GPU machine's NIC, a CPU machine's NIC) under BytePS's
    partition: ((2(n-1)/n * y + x) * S, n*x*S/k). The partition makes them equal."""
    x, y = byteps_partition(n, k)
    k = min(k, n)
    gpu = (2 * (n - 1) / n * y + x) * nbytes
    cpu = n * x * nbytes / k if k > 0 else 0.0
    return gpu, cpu


def byteps_wire_bytes(nbytes: float, n: int, k: int) -> float:
    """Bytes one GPU machine sends under BytePS (= what it receives)."""
    return byteps_machine_traffic(nbytes, n, k)[0] if n > 1 else 0.0
