"""Machines and two-level (hierarchical) allreduce (DESIGN §5 Network and cluster, §7).

A cluster is M machines of G GPUs. Inside a machine the GPUs talk over NVLink or PCIe
(`Machine`); between machines over the machine's NICs (`inter`, the line rate of all its
NICs together, split evenly among `nics` of them).

Hierarchical allreduce (ByteComp §2.1, Figure 1: intra, inter, intra phases):

    RS_intra(S) + AR_inter(S/g) on each of g parallel rings + AG_intra(S)

After the intra-machine reduce-scatter every GPU holds S/G of the machine's sum; the g
rings (default g = G, one per GPU shard) each allreduce S/g across the M machines at once.
They share the machine's NICs: rings are spread round-robin over the NICs, a NIC carrying
r rings gives each 1/r of its line rate, and the phase ends with the slowest ring, so a
ring runs at (B_inter / nics) / ceil(g / nics). With g a multiple of nics that is
B_inter / g, and AR_inter(S/g) at B_inter/g takes as long as one allreduce of S at
B_inter: the rings only help against per-ring limits, which this model does not have.

PCIe machines (BytePS slides, "P2: intra-machine communication"; DESIGN §5): by default
2 PCIe switches x 4 GPUs. GPUs under one switch talk through it at their own PCIe link
rate (`intra`). GPU-to-GPU traffic between switches goes up one switch's uplink to the
CPU root complex (and across QPI between sockets) and down the other's: the `cross`
Link stands for that path (default: the `uplink`, itself by default as fast as a GPU's
link). An intra-machine reduce-scatter is done in two steps, so that little crosses
between switches: a reduce-scatter inside each switch (q = G/s GPUs), leaving each GPU
S/q summed over its switch, then the s GPUs holding the same shard (one per switch)
reduce-scatter it across switches. The q cross-switch groups run at once and share the
cross path, which carries q * (s-1)/s * S/q = (s-1)/s * S each way, so that step costs
(s-1)alpha_x + (s-1)/s * S / (eta_x B_x): the time of a reduce-scatter of S over s ranks
on the cross path. Allgather mirrors it.

CPU-assisted aggregation (BytePS slides, "Our solution: CPU-assisted aggregation"), an
option for PCIe machines: reduce-scatter inside each switch, copy each switch's S/q
shards to host memory (S per uplink, up), sum the s copies on the CPU (s*S bytes read at
`cpu_sum_Bps`, when given), and later copy the result down (S per uplink) and allgather
inside each switch. Nothing crosses between switches GPU-to-GPU ("avoid direct copy
between GPUs under different PCIe switches"): each uplink carries S up, then S down,
where a flat ring puts 2(G-1)/G * S (7S/4 for G = 8) on it each way (the slides' "7M/4
vs M"). With a cross path as fast as the uplink the two-step reduce-scatter above moves
only (s-1)/s * S each way per phase and is faster; CPU-assisted aggregation pays off
when GPU-to-GPU copies across switches are slower than copies to host memory (set
`cross` below `uplink`), as on the machines BytePS measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from gcbench.comm.collectives import (
    Link,
    allgather_s,
    collective_s,
    reduce_scatter_s,
    ring_allreduce_s,
    ring_allreduce_wire_bytes,
)

# Defaults of DESIGN §5 / the config's Network: NVLink 150 GB/s per GPU (V100), PCIe 3.0
# x16 15.75 GB/s; 5 us per step and 0.8 efficiency inside a machine.
NVLINK_GBS = 150.0
PCIE_GBS = 15.75
INTRA_LATENCY_S = 5e-6
INTRA_EFFICIENCY = 0.8


@dataclass(frozen=True)
class Machine:
    """One GPU machine. `intra` is one GPU's link (NVLink, or its PCIe x16 link); for
    PCIe machines `switches` PCIe switches hold gpus/switches GPUs each, `uplink` is a
    switch's link to the CPU (GPU <-> host copies; default `intra`) and `cross` the
    GPU-to-GPU path between switches through the CPU/QPI (default `uplink`)."""

    gpus: int
    intra: Link
    kind: Literal["nvlink", "pcie"] = "nvlink"
    switches: int = 1
    uplink: Link | None = None
    cross: Link | None = None
    cpu_sum_Bps: float | None = None  # CPU summation throughput (CPU-assisted aggregation)

    def __post_init__(self) -> None:
        if self.gpus < 1 or self.switches < 1 or self.gpus % self.switches:
            raise ValueError(
                f"a machine needs gpus >= 1 split evenly over switches >= 1, got "
                f"{self.gpus} GPUs on {self.switches} switches"
            )
        if self.kind == "nvlink" and self.switches != 1:
            raise ValueError("PCIe switches apply to pcie machines only")
        if self.cpu_sum_Bps is not None and self.cpu_sum_Bps <= 0:
            raise ValueError(f"cpu_sum_Bps must be > 0, got {self.cpu_sum_Bps}")

    @property
    def gpus_per_switch(self) -> int:
        return self.gpus // self.switches

    @property
    def uplink_link(self) -> Link:
        return self.uplink if self.uplink is not None else self.intra

    @property
    def cross_link(self) -> Link:
        return self.cross if self.cross is not None else self.uplink_link


def nvlink_machine(
    gpus: int = 8,
    gbs: float = NVLINK_GBS,
    latency_s: float = INTRA_LATENCY_S,
    efficiency: float = INTRA_EFFICIENCY,
) -> Machine:
    """An NVLink machine: every intra-machine collective is one ring at `gbs` per GPU."""
    return Machine(gpus, Link(gbs * 1e9, latency_s, efficiency))


def pcie_machine(
    gpus: int = 8,
    switches: int = 2,
    gbs: float = PCIE_GBS,
    latency_s: float = INTRA_LATENCY_S,
    efficiency: float = INTRA_EFFICIENCY,
    uplink: Link | None = None,
    cross: Link | None = None,
    cpu_sum_Bps: float | None = None,
) -> Machine:
    """A PCIe machine, by default 2 switches x 4 GPUs with uplinks as fast as a GPU's link."""
    switches = min(switches, gpus)
    return Machine(
        gpus, Link(gbs * 1e9, latency_s, efficiency), "pcie", switches, uplink, cross, cpu_sum_Bps
    )


def _check_cpu_assisted(machine: Machine, cpu_assisted: bool) -> None:
    if cpu_assisted and machine.kind != "pcie":
        raise ValueError("CPU-assisted aggregation models PCIe machines only")


def intra_reduce_scatter_s(nbytes: float, machine: Machine, *, cpu_assisted: bool = False) -> float:
    """Reduce-scatter of S bytes over the machine's GPUs (for `cpu_assisted`: the reduce
    into host memory, including the CPU summation). See the module docstring."""
    _check_cpu_assisted(machine, cpu_assisted)
    if nbytes <= 0:
        return 0.0
    q, s = machine.gpus_per_switch, machine.switches
    t = reduce_scatter_s(nbytes, q, machine.intra)
    if cpu_assisted:
        up = machine.uplink_link
        t += up.latency_s + nbytes / up.effective_Bps  # S up each uplink, switches at once
        if machine.cpu_sum_Bps is not None:
            t += s * nbytes / machine.cpu_sum_Bps
        return t
    return t + reduce_scatter_s(nbytes, s, machine.cross_link)


def intra_allgather_s(nbytes: float, machine: Machine, *, cpu_assisted: bool = False) -> float:
    """Allgather of an S-byte array over the machine's GPUs (for `cpu_assisted`: the copy
    down from host memory, then the allgather inside each switch)."""
    _check_cpu_assisted(machine, cpu_assisted)
    if nbytes <= 0:
        return 0.0
    q, s = machine.gpus_per_switch, machine.switches
    t = allgather_s(nbytes, q, machine.intra)
    if cpu_assisted:
        up = machine.uplink_link
        return t + up.latency_s + nbytes / up.effective_Bps
    return t + allgather_s(nbytes, s, machine.cross_link)


def intra_allreduce_s(nbytes: float, machine: Machine, *, cpu_assisted: bool = False) -> float:
    """Allreduce inside one machine: its reduce-scatter, then its allgather. On an NVLink
    machine (or one PCIe switch) this equals a ring allreduce over the GPUs."""
    return intra_reduce_scatter_s(nbytes, machine, cpu_assisted=cpu_assisted) + intra_allgather_s(
        nbytes, machine, cpu_assisted=cpu_assisted
    )


def ring_share_link(inter: Link, nics: int = 1, rings: int = 1) -> Link:
    """The link one of `rings` concurrent inter-machine rings sees: `inter` is the
    machine's total line rate over `nics` NICs; rings go round-robin onto NICs and a NIC
    carrying r rings gives each 1/r of its rate; the busiest NIC carries ceil(rings/nics)."""
    if nics < 1 or rings < 1:
        raise ValueError(f"nics and rings must be >= 1, got {nics}, {rings}")
    per_ring = inter.bandwidth_Bps / nics / math.ceil(rings / nics)
    return Link(per_ring, inter.latency_s, inter.efficiency)


def hierarchical_allreduce_s(
    nbytes: float,
    machines: int,
    machine: Machine,
    inter: Link,
    *,
    nics: int = 1,
    rings: int | None = None,
    cpu_assisted: bool = False,
) -> float:
    """RS_intra(S) + AR_inter(S/g) on g parallel rings sharing the NICs + AG_intra(S).

    g = `rings`, default the machine's GPU count. With one machine only the intra phases
    run; with one GPU per machine only the inter allreduce of S (one ring) runs.
    """
    if nbytes <= 0:
        return 0.0
    g = machine.gpus if rings is None else rings
    t = intra_reduce_scatter_s(nbytes, machine, cpu_assisted=cpu_assisted)
    t += ring_allreduce_s(nbytes / g, machines, ring_share_link(inter, nics, g))
    return t + intra_allgather_s(nbytes, machine, cpu_assisted=cpu_assisted)


def hierarchical_wire_bytes(
    nbytes: float, machines: int, machine: Machine, rings: int | None = None
) -> dict[str, float]:
    """Bytes one GPU sends per link level in a hierarchical allreduce (no CPU assist):
    intra 2 * (G-1)/G * S (reduce-scatter + allgather, both switch levels together for
    PCIe: 2 * ((q-1)/q + (s-1)/(s*q)) * S = 2 * (G-1)/G * S), inter 2(M-1)/M * S/g per
    ring, carried by g of the G GPUs (the mean per GPU is g/G of it)."""
    g = machine.gpus if rings is None else rings
    G = machine.gpus
    intra = 0.0 if G <= 1 else 2 * (G - 1) / G * nbytes
    inter = ring_allreduce_wire_bytes(nbytes / g, machines) * g / G
    return {"intra": intra, "inter": inter}


def slowest_link(machine: Machine, inter: Link | None = None) -> Link:
    """The link a flat ring over every GPU moves at: the one with the smallest effective
    bandwidth among the GPU link, the path between PCIe switches (a ring over 2+
    switches crosses it)
    and, across machines, the machine's NICs (`inter`, all of them: NCCL spreads its
    channels over them), waiting at each step for the largest latency. This is what the
    first simulate backend used (min(intra, inter) bandwidth, max latency)."""
    links = [machine.intra] if machine.gpus > 1 else []  # one GPU: no hop inside
    if machine.switches > 1:
        links.append(machine.cross_link)
    if inter is not None:
        links.append(inter)
    if not links:
        return machine.intra  # one GPU, one machine: nothing is sent
    slow = min(links, key=lambda link: link.effective_Bps)
    return Link(slow.bandwidth_Bps, max(link.latency_s for link in links), slow.efficiency)


def flat_allreduce_s(nbytes: float, machines: int, machine: Machine, inter: Link) -> float:
    """One ring allreduce over all M*G GPUs at the slowest link (`slowest_link`): every
    ring edge carries 2(N-1)/N * S, so the slowest edge sets the pace."""
    n = machines * machine.gpus
    return ring_allreduce_s(nbytes, n, slowest_link(machine, inter if machines > 1 else None))


def machine_collective_s(collective: str, nbytes: float, machine: Machine) -> float:
    """Any collective of DESIGN §7 over the GPUs of one machine (S as in
    `gcbench.comm.collectives`: the whole array, or one rank's payload for `alltoall`,
    `allgather_payload` and `gather`).

    An NVLink machine (or a PCIe machine with one switch) runs one ring at the GPU link.
    A two-switch PCIe machine (q GPUs per switch, s switches, the cross path shared by the
    q parallel cross-switch groups) runs each collective in two steps, so that little
    crosses between switches:

    - reduce-scatter, allgather, allreduce: `intra_reduce_scatter_s` / `intra_allgather_s`;
    - alltoall: inside each switch, then across: (s-1)alpha_x + (s-1)/s * q*S / (eta_x B_x);
    - allgather of payloads: across switches (q groups share the path), then inside each
      switch the s payloads every GPU holds;
    - gather: the root's own link carries all G-1 payloads and the cross path the G-q from
      the other switches; the slower of the two sets the time;
    - broadcast, reduce: a pipelined chain through every GPU at the slowest link.
    """
    name = collective.replace("-", "_").lower()
    G = machine.gpus
    if G <= 1 or nbytes <= 0:
        return 0.0
    if machine.switches == 1:
        return collective_s(name, nbytes, G, machine.intra)
    q, s, cross = machine.gpus_per_switch, machine.switches, machine.cross_link
    if name == "reduce_scatter":
        return intra_reduce_scatter_s(nbytes, machine)
    if name == "allgather":
        return intra_allgather_s(nbytes, machine)
    if name == "allreduce":
        return intra_allreduce_s(nbytes, machine)
    if name == "alltoall":
        return collective_s(name, nbytes, q, machine.intra) + collective_s(
            name, q * nbytes, s, cross
        )
    if name == "allgather_payload":
        return collective_s(name, q * nbytes, s, cross) + collective_s(
            name, s * nbytes, q, machine.intra
        )
    if name == "gather":
        own_link = collective_s(name, nbytes, G, machine.intra)
        via_cross = collective_s(name, nbytes * (G - q) / (G - 1), G, cross)
        return max(own_link, via_cross)
    return collective_s(name, nbytes, G, slowest_link(machine))
