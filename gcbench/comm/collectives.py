"""Cost of collectives over one link level (DESIGN §7).

A link has bandwidth B (bytes/s), a per-step latency alpha and an efficiency eta
(achieved bus bandwidth / line rate). The timeline-simulator issue (#5) adds the other
collectives, hierarchy, PS and BytePS.
"""

from __future__ import annotations

from dataclasses import dataclass


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
