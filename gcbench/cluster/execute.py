"""One bucket's option executed for real (issue #14): the phase program of
`sim.options.Option` run on this worker's gradient with the real compressor, the real
collectives of `torch.distributed` (gloo, on CPU tensors; NCCL is not wired yet) and
the real push/pull to summation-server actors through Ray (`server.Servers`).

The state walks the option's steps as the simulator's lowering does (`sim.iteration`):
a dense fp32 (or fp16) vector, or after `c` this worker's payload, or after a compressed
allgather every peer's payload (after a compressed push/pull, the servers' recompressed
sum); `d` decompresses and sums. Levels are process groups: `flat` all workers, `intra`
the workers of this machine, `inter` the workers with this local rank on every machine
(one ring per local rank, as NCCL's hierarchical allreduce; one key per ring on the
servers). `byteps` sends BytePS's share through the servers and allreduces the rest.

The bytes each phase moves are counted from the payloads: the bytes one worker puts into
the collective or pushes (its dense slice, or its payloads' `wire_bytes`). Every option
of ByteComp's space runs: rooted sections (reduce or gather to a root, its work, the
broadcast), CPU compression, several rounds of a compressor (PowerSGD), alltoalls and
reduce-scatters of payloads (a chunk per destination, compressed on its own), and
compressed second steps (shards put back in order); what lies outside it raises
`NotEmulated` naming the option. `execute` runs an option in parts, for the wall
clock's threads; `run_option` runs it whole.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from gcbench.cluster.server import Servers
from gcbench.comm import byteps_partition
from gcbench.compress.base import Compressor, Memory, Payload
from gcbench.errors import ConfigError
from gcbench.sim.iteration import stream_of
from gcbench.sim.options import COLLECTIVE_TABLE, Op, Option, Phase, second_steps

# Compressed phases that take a payload per destination, compressed chunk by chunk
CHUNKED = ("alltoall", "reduce_scatter")

SUPPORTED = (
    "allreduce",
    "alltoall",
    "reduce_scatter",
    "allgather",
    "reduce",
    "gather",
    "broadcast",
    "pushpull",
    "byteps",
)


class NotEmulated(ConfigError):
    """An option with a phase or placement emulation does not execute yet (bad input for
    `mode: emulate`: the CLI says so in one line, the runner records the cell failed)."""


@dataclass
class Groups:
    """The process groups a worker's phases run on, and its place in each."""

    flat: object
    intra: object
    inter: object
    sizes: dict[str, int]
    ranks: dict[str, int]
    servers: Servers | None = None  # the cell's summation servers, where it has some

    def group(self, level: str) -> object:
        return {"flat": self.flat, "intra": self.intra, "inter": self.inter}[level]

    def global_rank(self, level: str, rank: int) -> int:
        """The global rank of the worker with rank `rank` in this worker's `level` group
        (what torch.distributed's rooted collectives name their root by)."""
        G = self.sizes["intra"]
        if level == "intra":
            return self.ranks["flat"] // G * G + rank
        if level == "inter":
            return rank * G + self.ranks["flat"] % G
        return rank


@dataclass
class Outcome:
    """A bucket's result on one worker: the aggregated gradient (the sum over workers)
    and the bytes this worker put into each phase."""

    aggregate: torch.Tensor
    phase_bytes: list[int] = field(default_factory=list)


def shard_slices(
    buckets: list[list[int]], elements: list[float] | None, numels: list[int]
) -> list[tuple[int, int] | None]:
    """Each plan bucket's slice of its tensors' concatenated gradient: None for a whole
    bucket; for a run of k consecutive buckets of the same tensors (COVAP's shards of a
    fusion bucket, HiPress's partitions of a large tensor: the plan's `elements` give
    their sizes), the j-th of k pieces, N·j/k to N·(j+1)/k rounded."""
    if elements is None:
        return [None] * len(buckets)
    out: list[tuple[int, int] | None] = []
    b = 0
    while b < len(buckets):
        k = 1
        while b + k < len(buckets) and buckets[b + k] == buckets[b]:
            k += 1
        if k == 1:
            out.append(None)
        else:
            n = sum(numels[i] for i in buckets[b])
            out += [(round(n * j / k), round(n * (j + 1) / k)) for j in range(k)]
        b += k
    return out


def payloads(
    options: list[Option | None],
    sent: list[list[list[int]]],
    group_sizes: dict[str, int] | None = None,
    splittable: bool = False,
) -> list[tuple[float | None, ...] | None]:
    """Per bucket, the payload each of its compressions (`c`, in order) made, in bytes,
    from the bytes of each phase that workers sent (`sent[rank][bucket][phase]`): the
    first phase after the `c` (it carries what the `c` made), the mean over the workers
    that sent one there (not those waiting out a rooted section); None where none was
    sent (the simulator then takes the compressor's size model), and None for a bucket
    without compression. Ahead of alltoalls a worker sends a payload per destination of
    them all: one of them, on average, where the simulator charges per chunk (an
    unsplittable compressor), given the levels' `group_sizes`."""
    out: list[tuple[float | None, ...] | None] = []
    for b, option in enumerate(options):
        if option is None or not option.compressed:
            out.append(None)
            continue
        made: list[float | None] = []
        phase = 0  # the phases before step i
        for i, step in enumerate(option.steps):
            if isinstance(step, Phase):
                phase += 1
                continue
            if step.op != "c":
                continue
            at = phase  # the phase right after the `c`: compressed, it carries the payload
            got = [rank[b][at] for rank in sent if at < len(rank[b]) and rank[b][at]]
            mean = sum(got) / len(got) if got else None
            if mean is not None and not splittable:
                levels = _chunked_ahead(option, i, ("alltoall",))
                mean /= math.prod((group_sizes or {}).get(lv, 1) for lv in levels)
            made.append(mean)
        out.append(tuple(made))
    return out


def check(option: Option, compressor: Compressor | None = None) -> None:
    """Raise `NotEmulated` unless every step of `option` (with `compressor`) can be
    executed here."""
    rounds = compressor.rounds if compressor is not None and option.compressed else 1
    for i, s in enumerate(option.steps):
        chunked = isinstance(s, Phase) and s.compressed and s.collective in CHUNKED
        # the payloads it takes were chunked at the last compression (nothing but
        # chunked phases and gathers in between)
        after = next((t for t in reversed(option.steps[:i]) if not (
            isinstance(t, Phase) and t.compressed and t.collective in (*CHUNKED, "gather")
        )), None)  # fmt: skip
        if chunked and not (isinstance(after, Op) and after.op == "c"):
            raise NotEmulated(f"option {option.name!r}: {s.token} of payloads forwarded from "
                              "an allgather is not emulated")  # fmt: skip
        if isinstance(s, Phase) and s.compressed and s.collective == "reduce":
            raise NotEmulated(f"option {option.name!r}: a compressed reduce is not emulated yet")
        if isinstance(s, Phase) and s.compressed and rounds > 1 and s.collective != "allreduce":
            raise NotEmulated(
                f"option {option.name!r}: {rounds} rounds per step through {s.token} (each "
                "round's payloads are summed before the next: allreduced)"
            )
        if isinstance(s, Phase) and s.collective not in SUPPORTED:
            raise NotEmulated(
                f"option {option.name!r}: {s.collective} is not emulated yet "
                f"(emulated: {', '.join(SUPPORTED)})"
            )


# The host cores a CPU (de)compression's log names (the simulator's `cpu:<b mod cores>`
# streams); the work itself runs where the wall clock's threads run it
CORES = 16

# What `execute` yields between its parts (the simulator's lowering, `sim.iteration`):
# before the first phase the work is the GPU's, behind backward; a GPU operation after a
# phase has run waits for backward to end
COMM, DEFERRED = "comm", "deferred"


def run_option(
    option: Option,
    x: torch.Tensor,
    compressor: Compressor,
    memory: Memory,
    key: str,
    step: int,
    groups: Groups,
    bucket: int = 0,
) -> Outcome:
    """Execute `option` on this worker's bucket gradient `x` (1-D fp32): the sum over
    every worker of what the option delivers, on every worker (`bucket`: the bucket's
    index, which places rooted sections)."""
    out = Outcome(torch.empty(0))
    for _ in execute(option, x, compressor, memory, key, step, groups, out, bucket=bucket):
        pass
    return out


@dataclass
class _Walk:
    """What one worker holds as it walks an option's steps (`execute`), and the steps'
    work on it: a dense vector `v`, or after `c` this worker's payload `mine`, or after a
    compressed allgather (or gather, broadcast, push/pull) the payloads `theirs`."""

    option: Option
    compressor: Compressor
    memory: Memory
    key: str
    step: int
    groups: Groups
    bucket: int
    log: list[tuple[str, str, str, float, float, int]] | None
    tag: str
    v: torch.Tensor | None
    dense_len: int  # the length of the vector last compressed
    mine: Payload | None = None  # after `c`: this worker's payload
    theirs: list[Payload] | None = None  # after a compressed allgather: every peer's
    sizes: list[int] = field(default_factory=list)  # the dense lengths before each
    # reduce-scatter (to undo padding)
    waiting: list[str] = field(default_factory=list)  # levels of the rooted sections this
    # worker is not the root of
    source: torch.Tensor | None = None  # the compensated gradient, for later rounds
    # After `c` ahead of alltoalls or reduce-scatters of payloads (`CHUNKED`): the vector
    # cut into a chunk per destination of each (`_chunk_compress`, the first level's
    # index major); `bundle` holds, per chunk not yet delivered, its contributions
    bundle: list[list[Payload]] | None = None
    chunk_cuts: list[int] = field(default_factory=list)  # the dense lengths each chunked
    # level's pair trims to
    # the chunked levels done (level, group size, this worker's index): a chunk's
    # payload decompresses under its own key (randomk's positions)
    chunk_levels: list[tuple[str, int, int]] = field(default_factory=list)
    second: tuple[bool, ...] = ()  # per step: a divisible pair's second (`second_steps`)
    # per compressed second step (`theirs` then holds shards, not contributions): its
    # level, the number of shards and the length to cut their concatenation to,
    # innermost first
    slice_levels: list[tuple[str, int, int]] = field(default_factory=list)

    def operate(self, at: int, s: Op) -> None:
        """Step `at`, an operation: `c` compresses (chunk by chunk ahead of alltoalls or
        reduce-scatters of payloads), `d` decompresses and sums (or puts shards in
        order)."""
        ahead = _chunked_ahead(self.option, at) if s.op == "c" else []
        if s.op == "c" and ahead:
            self.compress_chunks(ahead)
        elif s.op == "c":
            self.compress()
        elif self.slice_levels:
            self.put_shards()
        else:
            self.decompress()

    def compress_chunks(self, ahead: list[str]) -> None:
        """`c` ahead of the chunked phases at levels `ahead`: a payload per destination
        (ByteComp Table 3), each chunk compressed on its own."""
        v = self.v
        assert v is not None
        counts = [self.groups.sizes[level] for level in ahead]
        self.chunk_cuts = [v.numel()] + [
            -(-v.numel() // math.prod(counts)) * math.prod(counts[i:])
            for i in range(1, len(counts))
        ]  # the first pair trims the padding, the others' pieces fit exactly
        payloads_ = _chunk_compress(v.float(), math.prod(counts), self.compressor, self.memory,
                                    self.key, self.step)  # fmt: skip
        self.bundle, self.chunk_levels = [[p] for p in payloads_], []
        self.v = None

    def compress(self) -> None:
        """`c`: this worker's payload of its compensated vector; error feedback updated
        now, or after the last round for a compressor of several (PowerSGD's Q)."""
        assert self.v is not None
        self.chunk_levels = []
        self.dense_len = self.v.numel()  # what a broadcast of the root's sum will hold
        dense = self.v.float()
        comp = self.memory.compensate(dense, self.key, self.step)
        self.mine = self.compressor.compress(comp, self.key, self.step)
        if self.compressor.rounds > 1:  # later rounds compress it again (PowerSGD's Q)
            self.source = comp
        else:
            self.memory.update(comp, self.key, self.step, self.compressor, self.mine)
        # nothing dense held while suspended (the wall clock keeps a generator per
        # bucket until backward ends: bert-base's would hold 880 MB a worker)
        self.v = None

    def put_shards(self) -> None:
        """`d` after compressed second steps: each shard's contributions summed, the
        shards put in order."""
        assert self.theirs is not None
        theirs, slice_levels = self.theirs, self.slice_levels
        leaves = math.prod(shards for _, shards, _ in slice_levels)
        k = len(theirs) // leaves
        keys = _chunk_keys(self.key, self.chunk_levels, {lv for lv, _, _ in slice_levels},
                           leaves)  # fmt: skip
        pieces = [
            self.compressor.aggregate(theirs[i * k : (i + 1) * k], keys[i], self.step).reshape(-1)
            for i in range(leaves)
        ]
        for _, shards, cut in slice_levels:
            pieces = [torch.cat(pieces[j : j + shards])[:cut]
                      for j in range(0, len(pieces), shards)]  # fmt: skip
        self.v = pieces[0]
        self.mine, self.theirs, self.slice_levels = None, None, []

    def decompress(self) -> None:
        """`d`: the payloads held (this worker's, or every peer's) decompressed and
        summed."""
        got = self.theirs if self.theirs is not None else [self.mine]
        assert got[0] is not None
        pkey = _chunk_keys(self.key, self.chunk_levels, set(), 1)[0]
        self.v = self.compressor.aggregate(got, pkey, self.step).reshape(-1)  # type: ignore[arg-type]
        self.mine = self.theirs = None

    def phase(self, at: int, s: Phase) -> tuple[int, bool]:
        """Phase `s` at its level: the bytes this worker put into it, and whether the
        caller logs it (not inside a section rooted elsewhere, nor a compressed
        allreduce, which logs its rounds itself)."""
        groups = self.groups
        row = COLLECTIVE_TABLE[s.collective]
        # a divisible pair's second step at this level (its first opened it)
        second = self.second[at]
        group: Any = groups.group(s.level)
        size = groups.sizes[s.level]
        if row.servers and groups.servers is None:
            raise NotEmulated(f"option {self.option.name!r}: {s.token} needs summation servers")
        root = groups.global_rank(s.level, self.bucket % size)
        if self.waiting:  # inside a section rooted elsewhere: only its broadcast is ours
            self.await_root(s, group, root)
            return 0, False
        if row.opens and size > 1 and root != groups.ranks["flat"]:
            self.waiting.append(s.level)  # after sending, wait for the root's broadcast
        if s.compressed and s.collective in CHUNKED:
            return self.exchange_chunks(s, group, size), True
        if s.compressed and s.collective == "gather" and self.bundle is not None:
            return self.gather_chunks(group, size, root), True
        if s.compressed:
            return self.compressed_phase(s, group, size, root, second)
        return self.dense_phase(s, group, size, root), True

    def await_root(self, s: Phase, group: Any, root: int) -> None:
        """Phase `s` inside a section rooted elsewhere: nothing, unless it is the
        section's broadcast, which brings the root's payloads (and what they are) or its
        vector."""
        if COLLECTIVE_TABLE[s.collective].closes and s.level == self.waiting[-1]:
            self.waiting.pop()
            if s.compressed:  # the payloads the root holds, and what they are
                received: list[Any] = [None, None, None]
                dist.broadcast_object_list(received, src=root, group=group)
                self.theirs, self.slice_levels, self.chunk_levels = received
                self.mine = None
            else:  # into this worker's own vector, or the size it compressed
                if self.v is None:
                    self.v = torch.empty(self.dense_len, dtype=torch.float32)
                dist.broadcast(self.v, src=root, group=group)
                self.theirs = self.mine = None

    def exchange_chunks(self, s: Phase, group: Any, size: int) -> int:
        """A compressed alltoall or reduce-scatter: each destination's chunks to it, and
        back every peer's contributions to this worker's (summed, for a reduce-scatter);
        the bytes sent."""
        assert self.bundle is not None  # `check` refuses a chunked phase not after `c`
        bundle = self.bundle
        sent = sum(p.wire_bytes for entry in bundle for p in entry)
        per = len(bundle) // size  # the chunks for each destination
        outgoing = [bundle[j * per : (j + 1) * per] for j in range(size)]
        incoming = _alltoall_payloads(outgoing, group, self.groups, s.level)
        # per chunk left, every peer's contributions (peer-major), or their sum
        bundle = [[p for peer in incoming for p in peer[r]] for r in range(per)]
        if s.collective == "reduce_scatter":  # additive payloads
            bundle = [[self.compressor.reduce(entry)] for entry in bundle]
        self.chunk_levels.append((s.level, size, self.groups.ranks[s.level]))
        self.sizes.append(self.chunk_cuts[len(self.chunk_levels) - 1])
        self.mine = self.theirs = None
        self.bundle = bundle
        if per == 1:  # every chunked level done: this worker's chunk's contributions
            self.theirs, self.bundle = bundle[0], None
            if len(self.theirs) == 1:  # summed already (a reduce-scatter): one payload
                self.mine, self.theirs = self.theirs[0], None
        return sent

    def gather_chunks(self, group: Any, size: int, root: int) -> int:
        """A compressed gather of chunks not yet delivered, handed on to the root (each
        chunk's contributions, worker-major, there); the bytes sent."""
        assert self.bundle is not None
        sent = sum(p.wire_bytes for entry in self.bundle for p in entry)  # chunks, handed on
        parts: list[Any] | None = [None] * size if not self.waiting else None
        dist.gather_object(self.bundle, parts, dst=root, group=group)
        if parts is not None:  # the root: each chunk's contributions, worker-major
            self.bundle = [[p for w in parts for p in w[r]] for r in range(len(self.bundle))]
        return sent

    def compressed_phase(
        self, s: Phase, group: Any, size: int, root: int, second: bool
    ) -> tuple[int, bool]:
        """A compressed phase on the payloads this worker holds (its own, or those a
        gather brought it), by its collective (`_PAYLOAD_PHASES`): the bytes sent, and
        whether the caller logs it (a compressed allreduce logs its rounds itself)."""
        # what this worker holds: its payload, or the payloads a gather brought it
        held: list[Payload] = self.theirs if self.theirs is not None else [self.mine]  # type: ignore[list-item]
        assert held and held[0] is not None
        run = _PAYLOAD_PHASES.get(s.collective)
        if run is None:
            raise NotEmulated(f"option {self.option.name!r}: compressed {s.collective}")
        got = run(self, s, group, size, root, second, held)
        return (sum(p.wire_bytes for p in held), True) if got is None else (got, False)

    def gather_payloads(self, s: Phase, group: Any, size: int, root: int, second: bool,
                        held: list[Payload]) -> int | None:  # fmt: skip
        """Every worker's payloads to the root."""
        every: list[Any] | None = [None] * size if not self.waiting else None
        dist.gather_object(held, every, dst=root, group=group)
        self.theirs = [p for part in every for p in part] if every is not None else None
        self.mine = None
        return None

    def broadcast_payloads(self, s: Phase, group: Any, size: int, root: int, second: bool,
                           held: list[Payload]) -> int | None:  # fmt: skip
        """The root's payloads to every worker, and what they are (shards? chunks of
        which keys?)."""
        state = [held, self.slice_levels, self.chunk_levels]
        dist.broadcast_object_list(state, src=root, group=group)
        self.theirs, self.mine = held, None
        return None

    def allgather_payloads(self, s: Phase, group: Any, size: int, root: int, second: bool,
                           held: list[Payload]) -> int | None:  # fmt: skip
        """The peers' payloads (those a gather brought, or each one's own): to sum, or,
        closing a pair, shards (different slices)."""
        if self.mine is None:  # payloads a gather brought
            peers: list[Any] = [None] * size
            dist.all_gather_object(peers, held, group=group)
            self.theirs = [p for part in peers for p in part]
        else:
            self.theirs = _allgather_payloads(self.mine, group, size)
        if second:
            self.slice_levels.append((s.level, size, self.sizes.pop()))
        return None

    def own_payload(self, s: Phase) -> Payload:
        """This worker's own payload, which the phase needs (not payloads a gather
        brought)."""
        if self.mine is None:
            raise NotEmulated(f"option {self.option.name!r}: {s.token} after a gather")
        return self.mine

    def pushpull_payloads(self, s: Phase, group: Any, size: int, root: int, second: bool,
                          held: list[Payload]) -> int | None:  # fmt: skip
        """The servers sum and recompress: one payload back."""
        mine, servers = self.own_payload(s), self.groups.servers
        assert servers is not None
        self.theirs = [servers.pull(servers.push(self.key, self.step, mine))]
        self.mine = None
        return None

    def allreduce_payloads(self, s: Phase, group: Any, size: int, root: int, second: bool,
                           held: list[Payload]) -> int | None:  # fmt: skip
        """Additive payloads summed, round by round (logged here): the bytes sent."""
        mine = self.own_payload(s)
        stream = stream_of(s.level, self.groups.sizes["inter"])
        self.mine, sent = _allreduce_rounds(
            mine, self.source, self.compressor, self.memory,
            (self.key, self.step, group, stream), self.log, (self.tag, s.token),
        )  # fmt: skip
        self.source = None
        return sent

    def dense_phase(self, s: Phase, group: Any, size: int, root: int) -> int:
        """A phase on this worker's dense vector, by its collective (`_DENSE_PHASES`); the
        bytes it put in."""
        v = self.v
        assert v is not None
        sent = v.numel() * v.element_size()
        self.v = _DENSE_PHASES[s.collective](self, s, v, group, size, root)
        return sent

    def dense_allreduce(self, s: Phase, v: torch.Tensor, group: Any, size: int, root: int) -> Any:
        dist.all_reduce(v, group=group)
        return v

    def dense_pushpull(self, s: Phase, v: torch.Tensor, group: Any, size: int, root: int) -> Any:
        servers = self.groups.servers
        assert servers is not None
        return servers.pull(servers.push(self.key, self.step, v))

    def dense_byteps(self, s: Phase, v: torch.Tensor, group: Any, size: int, root: int) -> Any:
        servers = self.groups.servers
        assert servers is not None
        return _byteps(v, self.key, self.step, group, servers, len(servers.handles))

    def dense_reduce_scatter(
        self, s: Phase, v: torch.Tensor, group: Any, size: int, root: int
    ) -> Any:
        self.sizes.append(v.numel())
        return _reduce_scatter(v, group, size, self.groups.ranks[s.level])

    def dense_reduce(self, s: Phase, v: torch.Tensor, group: Any, size: int, root: int) -> Any:
        """The sum on the root (the others wait for its broadcast)."""
        dist.reduce(v, dst=root, group=group)
        return v

    def dense_broadcast(self, s: Phase, v: torch.Tensor, group: Any, size: int, root: int) -> Any:
        """The root's vector to every worker."""
        dist.broadcast(v, src=root, group=group)
        return v

    def dense_gather(self, s: Phase, v: torch.Tensor, group: Any, size: int, root: int) -> Any:
        raise NotEmulated(f"option {self.option.name!r}: a dense gather is not emulated")

    def dense_allgather(self, s: Phase, v: torch.Tensor, group: Any, size: int, root: int) -> Any:
        """The dense shards gathered back into the vector (cut to its size before the
        pair's reduce-scatter)."""
        parts = [torch.empty_like(v) for _ in range(size)]
        dist.all_gather(parts, v, group=group)
        return torch.cat(parts)[: self.sizes.pop()] if self.sizes else torch.cat(parts)


# What a worker does in a phase, by collective: the emulator's rows of the collective
# table (`sim.options.COLLECTIVE_TABLE` says what each does to the data; these run it on
# real tensors). Payload phases return the bytes they logged themselves, else None.
_PAYLOAD_PHASES = {
    "gather": _Walk.gather_payloads,
    "broadcast": _Walk.broadcast_payloads,
    "allgather": _Walk.allgather_payloads,
    "pushpull": _Walk.pushpull_payloads,
    "allreduce": _Walk.allreduce_payloads,
}
_DENSE_PHASES = {
    "allreduce": _Walk.dense_allreduce,
    "pushpull": _Walk.dense_pushpull,
    "byteps": _Walk.dense_byteps,
    "reduce_scatter": _Walk.dense_reduce_scatter,
    "reduce": _Walk.dense_reduce,
    "broadcast": _Walk.dense_broadcast,
    "gather": _Walk.dense_gather,
    "allgather": _Walk.dense_allgather,
}


def execute(
    option: Option,
    x: torch.Tensor,
    compressor: Compressor,
    memory: Memory,
    key: str,
    step: int,
    groups: Groups,
    out: Outcome,
    log: list[tuple[str, str, str, float, float, int]] | None = None,
    tag: str = "",
    bucket: int = 0,
) -> Iterator[str]:
    """`run_option` in parts, for the wall clock (`worker.Worker`): yields `COMM` before
    the first phase and `DEFERRED` before the first operation after a phase, so the
    caller can run each part on the thread the simulator puts it on; the aggregate lands
    in `out`. With `log`, each operation and phase appends (stream, label, kind, start,
    end, bytes), times from `time.perf_counter`, labelled `tag` and the step as the
    simulator labels its jobs (`bucket 3 inter:ag*`).

    Rooted sections (a reduce or gather at a level, up to the broadcast at that level)
    have their root at rank `bucket` mod n of the level's group, as the simulator puts
    them; the other workers of the group wait out the section and take the broadcast.
    Every worker yields at the same steps whatever its part, so the collectives of
    later buckets keep one order on every worker."""
    check(option, compressor)
    n = x.numel()
    machines = groups.sizes["inter"]
    w = _Walk(option, compressor, memory, key, step, groups, bucket, log, tag,
              v=x.half() if option.fp16 else x.clone(), dense_len=n,
              second=second_steps(option.steps))  # fmt: skip
    started = deferred = False
    for si, s in enumerate(option.steps):
        t0 = time.perf_counter()
        if isinstance(s, Op):
            if started and not deferred:
                deferred = True
                yield DEFERRED
                t0 = time.perf_counter()
            if w.waiting:  # the root's work
                continue
            w.operate(si, s)
            if log is not None:  # a CPU operation on a core of the host, as simulated
                kind = "compress" if s.op == "c" else "decompress"
                where = "compute" if s.where == "gpu" else f"cpu:{bucket % CORES}"
                log.append((where, f"{tag} {kind}", kind, t0, time.perf_counter(), 0))
            continue
        if not started:
            started = True
            yield COMM
            t0 = time.perf_counter()
        sent, logged = w.phase(si, s)
        out.phase_bytes.append(sent)
        if log is not None and logged:
            label = f"{tag} {s.token}"
            log.append((stream_of(s.level, machines), label, "comm", t0, time.perf_counter(), sent))
    assert w.v is not None, f"option {option.name!r} ends compressed"
    out.aggregate = w.v.float()[:n]


def _allreduce_rounds(
    mine: Payload,
    source: torch.Tensor | None,
    compressor: Compressor,
    memory: Memory,
    where: tuple[str, int, object, str],
    log: list[tuple[str, str, str, float, float, int]] | None,
    labels: tuple[str, str],
) -> tuple[Payload, int]:
    """Allreduce this worker's payload in place, then, for a compressor of several rounds
    (PowerSGD: Q from the summed P), compress the compensated gradient `source` again
    from the summed payload and allreduce that, round by round; error feedback is
    updated from the last round's own payload before it is summed. `where`: the key,
    step, process group and the phase's stream; `labels`: the bucket's tag and the
    phase's token. The summed last payload and the bytes this worker sent in all rounds;
    `log` gets each round's compression and communication as the simulator names them
    (`bucket 3 compress round 1`, `bucket 3 flat:ar* round 1`)."""
    key, step, group, stream = where
    tag, token = labels
    sent, payload = 0, mine
    for r in range(compressor.rounds):
        if r:
            assert source is not None
            t0 = time.perf_counter()
            payload = compressor.compress(source, key, step, payload)
            if log is not None:
                end = time.perf_counter()
                log.append(("compute", f"{tag} compress round {r}", "compress", t0, end, 0))
        if r == compressor.rounds - 1 and source is not None:
            memory.update(source, key, step, compressor, payload)
        t0 = time.perf_counter()
        for t in payload.tensors.values():
            if t.numel():  # COVAP's unselected shards send nothing (alike on every worker)
                dist.all_reduce(t, group=group)
        sent += payload.wire_bytes
        if log is not None:
            label = f"{tag} {token}" + (f" round {r}" if r else "")
            log.append((stream, label, "comm", t0, time.perf_counter(), payload.wire_bytes))
    return payload, sent


def _byteps(
    v: torch.Tensor, key: str, step: int, group: object, servers: Servers, k: int
) -> torch.Tensor:
    """BytePS's split (`comm.byteps.byteps_partition`): the first x of the vector through
    the servers and the rest allreduced among the machines, side by side (the push is
    sent before the allreduce starts, the pull taken after it ends)."""
    x, _ = byteps_partition(servers.machines, k)
    cut = round(x * v.numel())
    refs = servers.push(key, step, v[:cut]) if cut else []
    rest = v[cut:].clone()
    if rest.numel():
        dist.all_reduce(rest, group=group)
    return torch.cat([servers.pull(refs), rest]) if refs else rest


def _reduce_scatter(v: torch.Tensor, group: object, size: int, rank: int) -> torch.Tensor:
    """This worker's shard of the sum over the group (the vector padded to a multiple of
    the group size). gloo has no reduce-scatter: an allreduce, then the shard; the bytes
    counted are the reduce-scatter's, which is what the simulator charges."""
    shard = -(-v.numel() // size)
    padded = torch.zeros(shard * size, dtype=v.dtype)
    padded[: v.numel()] = v
    dist.all_reduce(padded, group=group)
    return padded[rank * shard : (rank + 1) * shard].clone()


def _chunked_ahead(
    option: Option, at: int, collectives: tuple[str, ...] = CHUNKED
) -> list[str]:
    """The levels of the compressed phases of `collectives` after step `at` (a `c`) up to
    the next operation, in order: the destinations a chunk is compressed for (the
    simulator counts the alltoalls alone)."""
    out: list[str] = []
    for t in option.steps[at + 1 :]:
        if isinstance(t, Op):
            break
        if t.compressed and t.collective in collectives:  # past a gather: its root hands on
            out.append(t.level)
    return out


def _chunk_keys(
    key: str, levels: list[tuple[str, int, int]], sliced: set[str], leaves: int
) -> list[str]:
    """The keys the held payloads were compressed under, per leaf: `key` where they were
    not chunked; else chunk `key:a2a<j>`, j this worker's index over the chunked levels
    not sliced (major) and the leaf's index over the sliced ones (minor; a leaf's index
    over sliced levels that were never chunked is dropped)."""
    if not levels:
        return [key] * leaves
    inner = math.prod(n for level, n, _ in levels if level in sliced)
    prefix = 0
    for level, n, mine in levels:
        if level not in sliced:
            prefix = prefix * n + mine
    return [f"{key}:a2a{prefix * inner + i % inner}" for i in range(leaves)]


def _chunk_compress(
    v: torch.Tensor, n: int, compressor: Compressor, memory: Memory, key: str, step: int
) -> list[Payload]:
    """`v` padded to n equal chunks (the shards an alltoall hands out), each compressed on
    its own with its own error feedback (`key:a2a<j>`): a payload per destination, as
    the simulator times an unsplittable compressor ahead of an alltoall."""
    shard = -(-v.numel() // n)
    padded = torch.zeros(shard * n, dtype=v.dtype)
    padded[: v.numel()] = v
    out = []
    for j in range(n):
        k = f"{key}:a2a{j}"
        comp = memory.compensate(padded[j * shard : (j + 1) * shard].clone(), k, step)
        payload = compressor.compress(comp, k, step)
        memory.update(comp, k, step, compressor, payload)
        out.append(payload)
    return out


def _alltoall_payloads(
    outgoing: list[list[list[Payload]]], group: Any, groups: Groups, level: str
) -> list[list[list[Payload]]]:
    """`outgoing[j]` (chunks, each a list of payloads, alike in count on every worker) to
    the group's rank j; back, what every rank sent this one, in rank order. The lengths
    first (data-dependent payloads differ in size), then each tensor point to point, one
    peer pair at a time (rank + d sends while rank - d receives)."""
    size, rank = groups.sizes[level], groups.ranks[level]
    flat = [[p for chunk in out for p in chunk] for out in outgoing]
    shape = [len(chunk) for chunk in outgoing[rank]]
    own = flat[rank]
    names = sorted(own[0].tensors)
    lengths = torch.tensor([[[p.tensors[k].numel() for k in names] for p in f] for f in flat])
    every = [torch.empty_like(lengths) for _ in range(size)]
    dist.all_gather(every, lengths, group=group)
    got: list[list[Payload]] = [own] * size
    for d in range(1, size):
        to, frm = (rank + d) % size, (rank - d) % size
        works: list[Any] = []
        received = []
        for q, mine in enumerate(own):
            recv = {}
            for t, k in enumerate(names):
                tag = q * len(names) + t
                src = flat[to][q].tensors[k].reshape(-1).contiguous()
                buf = torch.empty(int(every[frm][rank][q][t]), dtype=src.dtype)
                if src.numel():
                    works.append(dist.isend(src, groups.global_rank(level, to), group, tag=tag))
                if buf.numel():
                    works.append(dist.irecv(buf, groups.global_rank(level, frm), group, tag=tag))
                like = mine.tensors[k]
                recv[k] = buf.reshape(like.shape) if buf.numel() == like.numel() else buf
            received.append(Payload(recv, mine.shape, mine.dtype, info=dict(mine.info)))
        for w in works:
            w.wait()
        got[frm] = received
    out = []
    for peer in got:  # back into chunks
        chunks, at = [], 0
        for n in shape:
            chunks.append(peer[at : at + n])
            at += n
        out.append(chunks)
    return out


def _allgather_payloads(mine: Payload, group: object, size: int) -> list[Payload]:
    """Every peer's payload: per named tensor, the lengths first (data-dependent payloads
    differ in size between workers), then the tensors padded to the longest."""
    names = sorted(mine.tensors)
    lengths = torch.tensor([mine.tensors[k].numel() for k in names], dtype=torch.int64)
    every = [torch.empty_like(lengths) for _ in range(size)]
    dist.all_gather(every, lengths, group=group)
    peers: list[dict[str, torch.Tensor]] = [{} for _ in range(size)]
    for j, k in enumerate(names):
        t = mine.tensors[k].reshape(-1)
        longest = max(int(e[j]) for e in every)
        padded = torch.zeros(longest, dtype=t.dtype)
        padded[: t.numel()] = t
        parts = [torch.empty_like(padded) for _ in range(size)]
        dist.all_gather(parts, padded, group=group)
        for r in range(size):
            peers[r][k] = parts[r][: int(every[r][j])].reshape(
                mine.tensors[k].shape if int(every[r][j]) == t.numel() else (-1,)
            )
    return [Payload(p, mine.shape, mine.dtype, info=dict(mine.info)) for p in peers]
