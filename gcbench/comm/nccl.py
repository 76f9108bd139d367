"""Collectives by message size: NCCL's algorithms and protocols (issue #31).

NCCL does not run every allreduce as a ring moving 2(n-1) steps of its Simple protocol.
For each call it times every (algorithm, protocol) pair it could run, ring or tree
(allreduce only) with its LL, LL128 or Simple protocol, with a cost model of its own, and
runs the fastest: `ncclTopoTuneModel` and `ncclTopoGetAlgoTime` in NCCL's
src/graph/tuning.cc (tables as of v2.23.4, unchanged through v2.27.7). Each pair costs

    time(S) = latency + S / algorithm bandwidth

so a collective's cost is the lower envelope of a few affine functions of its size: LL's
few-microsecond steps win for small messages, Simple's full bandwidth for large ones, and
across many machines the tree's 2 log2(machines) network steps beat the ring's 2n.

gcbench keeps NCCL's shape and anchors it to the link's own numbers, so that a profile
fitted to a testbed (`gcbench calibrate`) still means what it says:

- **Ring/Simple is the link as gcbench costs it** (`gcbench.comm.collectives`): per step
  the link's latency alpha, bus bandwidth eta * B. The other pairs scale alpha by NCCL's
  per-step hardware latency relative to ring/Simple on the same hardware (`HW_LAT_US`:
  NVLink, PCIe, network), and eta * B by NCCL's bandwidth refinements (`_ring_share`,
  `_tree_share`). Each call also pays NCCL's base latency (`BASE_LAT_US`, absolute).
- **Ring latency across machines** (tuning.cc): of the ring's steps, 2 x machines for an
  allreduce (machines - 1 for reduce-scatter and allgather) cross the network at its
  latency; the rest stay inside a machine at the intra latency, at least NCCL's network
  overhead (1 us a step, 3 us for Simple, on x86). Broadcast and reduce pay the network's
  latency on every step when they cross machines.
- **Tree** (allreduce): latency 2((ranks per machine - 1) intraLat + floor(log2 machines)
  interLat); bus bandwidth 0.92 of the ring's (LL: / 3.8; LL128: 120/128 across
  machines, 7/9 inside one), algorithm bandwidth half the bus bandwidth.
- **LL128** runs only where the machine is NVLink (NCCL enables it by default only on
  NVLink-connected Volta, Ampere and Hopper GPUs); LL and Simple everywhere.
- Alltoall is NCCL's grouped send/receive, outside this model: it keeps the ring cost.
- **Per-protocol bandwidths** (`Protocols`): a network profile may correct LL's and
  LL128's bus bandwidth by a factor each, fitted by `gcbench calibrate` from a sweep.

Not modelled, each absorbed by a fitted eta and alpha or named as a limit: NCCL's absolute
caps on LL/LL128/tree bandwidth per channel and GPU generation (`llMaxBws`,
`perChMax*Bws`), its tree correction factors for medium sizes (they make time fall as the
size grows past some powers of two, and gcbench's planner bounds need time to grow with
size), the ring plateau factor (x1.4-1.9 on Simple's latency across machines), channel
counts, and NVLS, CollNet and PAT. Published two-machine sweeps reach bus bandwidths above
their NICs' line rate at large sizes (AWS p4de 78 GB/s on 4 x 100 Gb/s, OCI 238 on 16 x
100, AWS p5 487 on 32 x 100; `benchmarks/data/nccl-tests`): a ring cannot (each machine
sends 2(n-1)/n of the buffer), a double binary tree over two machines sends about the
buffer once; this model's tree takes NCCL's tuning-model bandwidth (half its bus
bandwidth), so those points are beyond it and a fitted efficiency stops at 1.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from gcbench.comm.collectives import SHAPES, Link, collective_s

PROTOCOLS = ("LL", "LL128", "Simple")
# baseLat (us), per call: {algorithm: (LL, LL128, Simple)}; NCCL v2.23.4 tuning.cc.
BASE_LAT_US = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4)}
# hwLat (us), per step: {hardware: {algorithm: (LL, LL128, Simple)}}; NCCL v2.23.4.
HW_LAT_US = {
    "nvlink": {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4)},
    "pcie": {"tree": (1.0, 1.9, 4.0), "ring": (1.0, 2.5, 5.7)},
    "net": {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0)},
}
# getNetOverhead: a step inside a machine of a ring that crosses machines costs at least
# this (us) on x86 (Intel 1, AMD 2: Intel's taken), three times that for Simple.
NET_OVERHEAD_US = 1.0
# The collectives NCCL's tuning model covers (alltoall is send/receive, outside it).
MODELLED = frozenset(SHAPES) - {"alltoall"}

Piece = tuple[float, float]  # time = a + b * S


class Protocols(NamedTuple):
    """Per-protocol corrections to NCCL's tuning model, fitted by `gcbench calibrate` from
    an nccl-tests sweep across sizes (the network profile's `nccl_ll_bandwidth` and
    `nccl_ll128_bandwidth`): LL's and LL128's bus bandwidth, each a multiple of what the
    model above gives (Simple's is the link's own eta * B). 1: NCCL's model as it is.

    Their latencies are not corrected: where LL runs (the small sizes) its latency is the
    link's alpha as fitted, so a separate LL latency is the same parameter twice; fitted
    on the 19 published sweeps NCCL tuned itself (`benchmarks/nccl_sweeps.py`), an LL and
    an LL128 latency beside these bandwidths left the error between sizes as it was (6.2%
    against 5.8% without) and made large -> small worse (30.9% -> 40.2%)."""

    ll_bandwidth: float = 1.0
    ll128_bandwidth: float = 1.0

    def scale(self, p: int, a: float, b: float) -> Piece:
        """(a, b) of protocol p's piece with its correction (p: LL 0, LL128 1, Simple 2)."""
        return (a, b) if p == 2 else (a, b / self[p])


AS_NCCL = Protocols()


def _ring_share(p: int, ppn: float) -> float:
    """Ring bus bandwidth of protocol p over Simple's (tuning.cc's refinements): LL half,
    LL128 0.92 (0.7 with one GPU a machine), Simple all of it."""
    return (0.5, 0.92 if ppn >= 2 else 0.7, 1.0)[p]


def _tree_share(p: int, machines: int) -> float:
    """Tree bus bandwidth over the ring's Simple: 0.92, LL that / 3.8, LL128 that x 120/128
    across machines (7/9 inside one)."""
    return 0.92 * (1 / 3.8, 120 / 128 if machines > 1 else 7 / 9, 1.0)[p]


def _step(link: Link, hw: str, algorithm: str, p: int) -> float:
    """One step's latency (s) of (algorithm, protocol p) on `link`: the link's alpha (its
    ring/Simple step) scaled as NCCL's hardware latencies scale."""
    table = HW_LAT_US[hw]
    return link.latency_s * table[algorithm][p] / table["ring"][2]


def pieces(
    collective: str,
    ranks: int,
    machines: int,
    intra: Link,
    inter: Link | None,
    bus: Link,
    *,
    nvlink: bool,
    protocols: Protocols = AS_NCCL,
) -> tuple[Piece, ...]:
    """(a, b) per (algorithm, protocol) NCCL could run: `collective` over `ranks` GPUs on
    `machines` machines (ranks / machines each), GPUs inside one on `intra` (NVLink if
    `nvlink`, else PCIe), machines on `inter`; `bus` is the link whose eta * B is
    ring/Simple's bus bandwidth (the slowest the ring crosses); `protocols` corrects LL's
    and LL128's. The cost of a size S is min(a + b * S) over the pieces; S as
    `gcbench.comm.collectives` reads it."""
    shape = SHAPES[collective]
    if ranks <= 1 or collective not in MODELLED:
        return ()
    steps, factor = shape.steps(ranks), shape.factor(ranks)
    ppn = ranks / machines
    intra_hw = "nvlink" if nvlink else "pcie"
    net = inter if machines > 1 and inter is not None else None
    out: list[Piece] = []
    for p in range(3):
        if p == 1 and not nvlink:
            continue
        # ring
        if net is None:
            lat = steps * _step(intra, intra_hw, "ring", p)
        elif collective in ("broadcast", "reduce"):
            lat = steps * _step(net, "net", "ring", p)
        else:  # NCCL's nInterSteps; with one GPU a machine every step crosses
            over = min(2 * machines if collective == "allreduce" else machines - 1, steps)
            floor = NET_OVERHEAD_US * 1e-6 * (3 if p == 2 else 1)
            intra_step = max(_step(intra, intra_hw, "ring", p), floor)
            lat = (steps - over) * intra_step + over * _step(net, "net", "ring", p)
        a = BASE_LAT_US["ring"][p] * 1e-6 + lat
        out.append(protocols.scale(p, a, factor / (_ring_share(p, ppn) * bus.effective_Bps)))
        if collective != "allreduce":
            continue
        # tree (double binary tree): its algorithm bandwidth is half its bus bandwidth
        lat = 2 * (ppn - 1) * _step(intra, intra_hw, "tree", p)
        if net is not None:
            lat += 2 * int(math.log2(machines)) * _step(net, "net", "tree", p)
        a = BASE_LAT_US["tree"][p] * 1e-6 + lat
        out.append(protocols.scale(p, a, 2 / (_tree_share(p, machines) * bus.effective_Bps)))
    return tuple(out)


def _slowest(machines: int, intra: Link, inter: Link | None) -> Link:
    """The link a ring over `machines` machines is bound by: the slower of the two."""
    links = [intra] + ([inter] if inter is not None and machines > 1 else [])
    return min(links, key=lambda link: link.effective_Bps)


def nccl_collective_s(
    collective: str,
    nbytes: float,
    ranks: int,
    machines: int,
    intra: Link,
    inter: Link | None = None,
    bus: Link | None = None,
    *,
    nvlink: bool = True,
    protocols: Protocols = AS_NCCL,
) -> float:
    """Time of `collective` of `nbytes` as NCCL would run it (`pieces`); `bus` defaults to
    the slower of `intra` and `inter`. Alltoall keeps the ring cost."""
    if nbytes <= 0 or ranks <= 1:
        return 0.0
    bus = bus or _slowest(machines, intra, inter)
    if collective not in MODELLED:
        return collective_s(collective, nbytes, ranks, bus)
    got = pieces(collective, ranks, machines, intra, inter, bus, nvlink=nvlink,
                 protocols=protocols)
    return min(a + b * nbytes for a, b in got)


def names(collective: str, nvlink: bool) -> tuple[str, ...]:
    """'algorithm/protocol' of each of `pieces`' pieces, in their order."""
    return tuple(
        f"{alg}/{PROTOCOLS[p]}"
        for p in range(3)
        if p != 1 or nvlink
        for alg in (("ring", "tree") if collective == "allreduce" else ("ring",))
    )


def fastest(got: tuple[Piece, ...], labels: tuple[str, ...], nbytes: float) -> str:
    """The label of the piece of least time at `nbytes` (ring/Simple without pieces)."""
    if not got:
        return "ring/Simple"
    return labels[min(range(len(got)), key=lambda i: got[i][0] + got[i][1] * nbytes)]
