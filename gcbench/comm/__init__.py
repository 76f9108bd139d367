"""Collective cost models: pure functions of bytes, ranks and a link (no torch, no ray)."""

from gcbench.comm.collectives import Link, ring_allreduce_s, ring_allreduce_wire_bytes

__all__ = ["Link", "ring_allreduce_s", "ring_allreduce_wire_bytes"]
