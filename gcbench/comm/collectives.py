"""Cost of collectives over one link level (DESIGN §7, cost-model table).

A link has bandwidth B (bytes/s, line rate, one direction), a per-step latency alpha and
an efficiency eta (achieved bus bandwidth / line rate). Every collective here costs

    steps(n) * alpha + factor(n) * S / (eta * B)

over n ranks, so one pair (steps, factor) per collective describes it; `cost_shape` gives
that pair, which is also what `gcbench.comm.calibrate` fits against. S is in the unit
nccl-tests reports as "size": the whole array for allreduce, reduce-scatter, allgather,
broadcast and reduce; the buffer of one rank for alltoall; and, for the allgather and
gather of compressed payloads, the payload m of one rank.

Ring algorithms (ACP-SGD §II-A1; ByteComp §2.1): an allreduce is a reduce-scatter then an
allgather, n-1 steps each moving S/n bytes per rank; broadcast and reduce are pipelined
along a chain, so their time tends to S/(eta B) plus one latency per hop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args


@dataclass(frozen=True)
class Link:
    bandwidth_Bps: float  # line rate, bytes per second, one direction
    latency_s: float  # per collective step
    efficiency: float  # achieved bus bandwidth / line rate, in (0, 1]

    def __post_init__(self) -> None:
        if self.bandwidth_Bps <= 0 or not 0 < self.efficiency <= 1 or self.latency_s < 0:
            raise ValueError(f"invalid link {self}")

    @property
    def effective_Bps(self) -> float:
        return self.bandwidth_Bps * self.efficiency


def ring_allreduce_s(nbytes: float, n: int, link: Link) -> float:
    """Ring allreduce of `nbytes` over `n` ranks: 2(n-1)alpha + 2(n-1)/n * S / (eta B).

    2(n-1) steps (reduce-scatter, then allgather), each moving S/n bytes per rank; the
    bus-bandwidth factor 2(n-1)/n is nccl-tests' for allreduce.
    """
    if n <= 1 or nbytes <= 0:
        return 0.0
    return 2 * (n - 1) * link.latency_s + 2 * (n - 1) / n * nbytes / link.effective_Bps


def ring_allreduce_wire_bytes(nbytes: float, n: int) -> float:
    """Bytes each rank sends in a ring allreduce of `nbytes`: 2(n-1)/n * S."""
    return 0.0 if n <= 1 else 2 * (n - 1) / n * nbytes


Collective = Literal[
    "allreduce",
    "reduce_scatter",
    "allgather",
    "allgather_payload",
    "alltoall",
    "broadcast",
    "reduce",
    "gather",
]
COLLECTIVES: tuple[str, ...] = get_args(Collective)


def _name(collective: str) -> str:
    name = collective.replace("-", "_").lower()
    if name not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}; valid: {', '.join(COLLECTIVES)}")
    return name


def cost_shape(collective: str, n: int) -> tuple[float, float]:
    """(steps, factor) of `collective` over `n` ranks: time = steps*alpha + factor*S/(eta B).

    The table of DESIGN §7; `n <= 1` costs nothing, (0, 0).
    """
    name = _name(collective)
    if n <= 1:
        return 0.0, 0.0
    steps = float(n - 1)
    if name == "allreduce":
        return 2 * steps, 2 * (n - 1) / n
    if name in ("reduce_scatter", "allgather", "alltoall"):
        return steps, (n - 1) / n
    if name in ("broadcast", "reduce"):
        # pipelined chain: n-1 hops to fill, then the whole array streams at link speed
        return steps, 1.0
    # allgather_payload, gather: every rank receives (n-1) payloads of m bytes (the root
    # does, for gather), one per step
    return steps, float(n - 1)


def collective_s(collective: str, nbytes: float, n: int, link: Link) -> float:
    """Time of `collective` of `nbytes` (see the module docstring for S) over `n` ranks."""
    steps, factor = cost_shape(collective, n)
    if nbytes <= 0 or steps == 0:
        return 0.0
    return steps * link.latency_s + factor * nbytes / link.effective_Bps


def copy_s(nbytes: float, link: Link) -> float:
    """A point-to-point copy of S bytes over one link (a GPU <-> host PCIe copy):
    alpha + S/(eta B); nothing to copy costs nothing."""
    if nbytes <= 0:
        return 0.0
    return link.latency_s + nbytes / link.effective_Bps


def allreduce_s(nbytes: float, n: int, link: Link) -> float:
    """Ring allreduce: 2(n-1)alpha + 2(n-1)/n * S/(eta B) (same as `ring_allreduce_s`)."""
    return collective_s("allreduce", nbytes, n, link)


def reduce_scatter_s(nbytes: float, n: int, link: Link) -> float:
    """Ring reduce-scatter of an S-byte array: (n-1)alpha + (n-1)/n * S/(eta B)."""
    return collective_s("reduce_scatter", nbytes, n, link)


def allgather_s(nbytes: float, n: int, link: Link) -> float:
    """Ring allgather building an S-byte array (S/n from each rank):
    (n-1)alpha + (n-1)/n * S/(eta B)."""
    return collective_s("allgather", nbytes, n, link)


def allgather_payload_s(payload_bytes: float, n: int, link: Link) -> float:
    """Ring allgather of a compressed payload of m bytes per rank:
    (n-1)alpha + (n-1) * m/(eta B). Each rank then decompresses n-1 payloads
    (`allgather_decompressions`), the reason allgather schemes scale badly (DESIGN §7)."""
    return collective_s("allgather_payload", payload_bytes, n, link)


def allgather_decompressions(n: int) -> int:
    """Payloads each rank decompresses after an allgather of compressed payloads: n-1
    (its own payload it already has uncompressed)."""
    return max(0, n - 1)


def alltoall_s(nbytes: float, n: int, link: Link) -> float:
    """Alltoall of S bytes per rank (S/n to each peer): (n-1)alpha + (n-1)/n * S/(eta B)."""
    return collective_s("alltoall", nbytes, n, link)


def broadcast_s(nbytes: float, n: int, link: Link) -> float:
    """Pipelined broadcast of S bytes from one root: (n-1)alpha + S/(eta B)."""
    return collective_s("broadcast", nbytes, n, link)


def reduce_s(nbytes: float, n: int, link: Link) -> float:
    """Pipelined reduce of S bytes to one root: (n-1)alpha + S/(eta B)."""
    return collective_s("reduce", nbytes, n, link)


def gather_s(payload_bytes: float, n: int, link: Link) -> float:
    """Gather of m bytes per rank to one root: (n-1)alpha + (n-1) * m/(eta B); the root's
    ingress carries all n-1 payloads."""
    return collective_s("gather", payload_bytes, n, link)


def wire_bytes(collective: str, nbytes: float, n: int) -> float:
    """Mean bytes one rank sends in `collective` (total bytes on the wire / n).

    For the symmetric collectives every rank sends the same: allreduce 2(n-1)/n * S;
    reduce-scatter, allgather, alltoall (n-1)/n * S; allgather of payloads (n-1) * m
    (a ring forwards every other rank's payload). In a pipelined broadcast or reduce all
    ranks but one (the chain's tail, the root) send S, so the mean is (n-1)/n * S; in a
    gather the n-1 non-roots send m each, mean (n-1)/n * m.
    """
    name = _name(collective)
    if n <= 1 or nbytes <= 0:
        return 0.0
    if name == "allreduce":
        return ring_allreduce_wire_bytes(nbytes, n)
    if name == "allgather_payload":
        return (n - 1) * nbytes
    return (n - 1) / n * nbytes


# nccl-tests' PERFORMANCE.md: busbw = algbw * factor, algbw = size / time.
_BUS_FACTORS = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,  # nccl-tests' gather: size = the root's whole buffer
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}


def bus_factor(collective: str, n: int) -> float:
    """nccl-tests' bus-bandwidth factor: busbw = (size / time) * factor.

    allreduce 2(n-1)/n; reduce-scatter, allgather, alltoall, gather (n-1)/n; broadcast
    and reduce 1. With our cost model, busbw tends to eta*B for large sizes.
    """
    name = collective.replace("-", "_").lower()
    if name not in _BUS_FACTORS:
        raise ValueError(f"no bus factor for {collective!r}; valid: {', '.join(_BUS_FACTORS)}")
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return float(_BUS_FACTORS[name](n))
