"""The CPU summation-server stand-in (BytePS, DESIGN §7; issue #14): a Ray actor the
workers push to and pull from through Ray (actor calls and the object store), not through
the process groups.

`Server.pushpull` is one push and its pull: a worker sends what it holds (a dense slice or
its compressed payload) and gets back the sum over the `expected` workers of its ring once
the last has pushed. Dense slices are summed in the pushers' order (rank on the ring,
whatever the arrival order), so the aggregate is the same on every run. Compressed
payloads are decompressed, summed, and the sum compressed again with the server's own
error-feedback memory before it is pulled (BytePS-Compress, ByteComp §2.2: "the
summation servers decompress, aggregate and recompress").

`Servers` is a worker's view of the cell's servers: a dense vector is cut into BytePS's
4,096,000-byte partitions dealt round-robin to the servers (`comm.byteps.server_loads`'s
rule), a payload goes whole to one server chosen by its key.
"""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import dataclass, field
from typing import Any

import torch

from gcbench.comm import PARTITION_BYTES
from gcbench.compress import create, create_memory
from gcbench.compress.base import Payload


@dataclass
class _Slot:
    """One key and step's pushes, until every pusher has pulled the sum."""

    parts: dict[int, Any] = field(default_factory=dict)  # by the pusher's rank on its ring
    done: asyncio.Event = field(default_factory=asyncio.Event)
    result: Any = None
    pulled: int = 0


class Server:
    """A summation server: sums what the workers of a ring push under one key and step."""

    def __init__(self, compressor: str, params: dict[str, Any], memory: str):
        """`memory`: the error-feedback memory the cell's strategy keeps for its
        compressor (`Strategy.memory_kind`)."""
        torch.set_num_threads(1)  # the servers share the host's cores with the workers
        self.compressor = create(compressor, **params)
        self.memory = create_memory(memory)
        self.slots: dict[tuple[str, int], _Slot] = {}

    async def pushpull(
        self, key: str, step: int, expected: int, rank: int, data: Any, codec: str = ""
    ) -> Any:
        """Push `data` (a tensor or a Payload) as pusher `rank` of `expected` under `key`;
        returns the sum once all have pushed (for payloads a Payload, recompressed: the
        compressor keyed `codec`, the bucket's key on the workers, the memory `key`)."""
        slot = self.slots.setdefault((key, step), _Slot())
        slot.parts[rank] = data
        if len(slot.parts) == expected:
            parts = [slot.parts[r] for r in sorted(slot.parts)]
            slot.result = self._sum(key, codec or key, step, parts)
            slot.done.set()
        await slot.done.wait()
        slot.pulled += 1
        if slot.pulled == expected:
            del self.slots[(key, step)]
        return slot.result

    def _sum(self, key: str, codec: str, step: int, parts: list[Any]) -> Any:
        if isinstance(parts[0], torch.Tensor):
            total = parts[0].clone()
            for p in parts[1:]:
                total += p
            return total
        dense = self.compressor.aggregate(parts, codec, step).reshape(-1).float()
        comp = self.memory.compensate(dense, key, step)
        out = self.compressor.compress(comp, codec, step)
        self.memory.update(comp, key, step, self.compressor, out)
        return out

    def ready(self) -> str:
        """Answers once the actor runs: the Ray node it runs on."""
        import ray

        return str(ray.get_runtime_context().get_node_id())


class Servers:
    """A worker's view of the cell's servers (see the module docstring)."""

    def __init__(self, handles: list[Any], ring: int, machines: int, machine: int):
        self.handles, self.ring, self.machines, self.machine = handles, ring, machines, machine

    def push(self, key: str, step: int, data: torch.Tensor | Payload) -> list[Any]:
        """Push `data` to the servers (this worker's ring's key); the references to pull."""
        slot = f"{key} ring {self.ring}"
        k = len(self.handles)
        args = (step, self.machines, self.machine)
        if isinstance(data, Payload):
            server = self.handles[zlib.crc32(slot.encode()) % k]
            return [server.pushpull.remote(slot, *args, data, key)]
        per = max(1, PARTITION_BYTES // data.element_size())
        cuts = range(0, data.numel(), per)
        return [
            self.handles[i % k].pushpull.remote(f"{slot} part {i}", *args, data[c : c + per])
            for i, c in enumerate(cuts)
        ] or [self.handles[0].pushpull.remote(f"{slot} part 0", *args, data)]

    @staticmethod
    def pull(refs: list[Any]) -> Any:
        """The sums pushed with `push`: one payload, or the dense partitions joined."""
        import ray

        got = ray.get(refs)
        if isinstance(got[0], Payload):
            return got[0]
        return torch.cat(got)
