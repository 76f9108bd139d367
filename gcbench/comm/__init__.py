"""Collective cost models: pure functions of bytes, ranks and a link (no torch, no ray).

- `collectives`: one link level: ring allreduce, reduce-scatter, allgather (dense and of
  compressed payloads), alltoall, broadcast, reduce, gather; wire bytes; nccl-tests'
  bus-bandwidth factors.
- `hierarchy`: NVLink and PCIe machines, two-level allreduce with parallel inter-machine
  rings sharing the NICs, the flat ring at the slowest link, CPU-assisted aggregation.
- `byteps`: PS push+pull over 4,096,000-byte partitions, BytePS's PS/allreduce partition.
- `nccl`: NCCL's algorithms (ring, tree) and protocols (LL, LL128, Simple) by message
  size, anchored to the link's numbers; the fastest runs.
- `calibrate`: fit a link's latency and efficiency from measured (bytes, seconds) points.
"""

from gcbench.comm.byteps import (
    PARTITION_BYTES,
    byteps_partition,
    byteps_s,
    byteps_wire_bytes,
    ps_pushpull_s,
    ps_wire_bytes,
)
from gcbench.comm.calibrate import Fit, fit_hierarchical_inter, fit_link, read_points_csv
from gcbench.comm.collectives import (
    COLLECTIVES,
    Link,
    allgather_decompressions,
    allgather_payload_s,
    allgather_s,
    allreduce_s,
    alltoall_s,
    broadcast_s,
    bus_factor,
    collective_s,
    copy_s,
    cost_shape,
    gather_s,
    reduce_s,
    reduce_scatter_s,
    ring_allreduce_s,
    ring_allreduce_wire_bytes,
    wire_bytes,
)
from gcbench.comm.hierarchy import (
    Machine,
    flat_allreduce_s,
    hierarchical_allreduce_s,
    hierarchical_wire_bytes,
    intra_allgather_s,
    intra_allreduce_s,
    intra_reduce_scatter_s,
    machine_collective_s,
    nvlink_machine,
    pcie_machine,
    ring_share_link,
    slowest_link,
)
from gcbench.comm.nccl import AS_NCCL as NCCL_AS_IS
from gcbench.comm.nccl import MODELLED as NCCL_MODELLED
from gcbench.comm.nccl import Protocols as NcclProtocols
from gcbench.comm.nccl import fastest as nccl_fastest
from gcbench.comm.nccl import names as nccl_names
from gcbench.comm.nccl import nccl_collective_s
from gcbench.comm.nccl import pieces as nccl_pieces

__all__ = [
    "COLLECTIVES",
    "PARTITION_BYTES",
    "Fit",
    "Link",
    "Machine",
    "allgather_decompressions",
    "allgather_payload_s",
    "allgather_s",
    "allreduce_s",
    "alltoall_s",
    "broadcast_s",
    "bus_factor",
    "byteps_partition",
    "byteps_s",
    "byteps_wire_bytes",
    "collective_s",
    "copy_s",
    "cost_shape",
    "fit_hierarchical_inter",
    "fit_link",
    "flat_allreduce_s",
    "gather_s",
    "hierarchical_allreduce_s",
    "hierarchical_wire_bytes",
    "intra_allgather_s",
    "intra_allreduce_s",
    "intra_reduce_scatter_s",
    "machine_collective_s",
    "NCCL_AS_IS",
    "NCCL_MODELLED",
    "NcclProtocols",
    "nccl_collective_s",
    "nccl_fastest",
    "nccl_names",
    "nccl_pieces",
    "nvlink_machine",
    "pcie_machine",
    "ps_pushpull_s",
    "ps_wire_bytes",
    "read_points_csv",
    "reduce_s",
    "reduce_scatter_s",
    "ring_allreduce_s",
    "ring_allreduce_wire_bytes",
    "ring_share_link",
    "slowest_link",
    "wire_bytes",
]
