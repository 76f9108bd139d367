"""Compression options as phase programs, and their enumeration (ByteComp §4.2).

An **option** says how one bucket is synchronised: an ordered list of *phases* — each a
level (`flat` over every GPU; `intra` inside a machine; `inter` across machines), a
collective, and whether the data on the wire is compressed (C) or not (U) — with the
compression (`c`) and decompression (`d`) operations between them, each placed on the GPU
or the CPU, and optionally an fp16 cast of the uncompressed phases. It is written as
tokens, e.g. the two-level allgather of HiTopKComm:

    intra:rs  gc  inter:ag*  gd  intra:ag

(`*` marks a compressed phase; `gc`/`cc` compress on the GPU/CPU, `gd`/`cd` decompress;
a leading `fp16` casts the uncompressed phases). `Option.parse` reads that form and
`Option.name` writes it.

**The enumeration rule** (it reproduces ByteComp's count, |C| = 4,341 for a non-additive
compressor):

1. *Phases* follow Table 2's routines. A flat option is one indivisible collective or a
   divisible pair. A hierarchical option is an intra-machine first step, the
   inter-machine communication (indivisible or a divisible pair) and the intra-machine
   second step; intra-machine phases are always divisible (§4.2.1, Dimension 4: "the
   former is better than the latter due to the less amount of traffic volume").
2. *Collectives* (Table 3): uncompressed indivisible = allreduce; uncompressed first
   steps = reduce-scatter, reduce; compressed indivisible = allgather; compressed first
   steps = alltoall, gather; second steps = allgather, broadcast, either compressed or
   not. Pruning rule 3 pairs the steps: reduce-scatter and alltoall with allgather,
   reduce and gather with broadcast. Compressed data is never allreduced (§4.2.1,
   Dimension 3: aggregation of compressed payloads is not associative) — unless the
   compressor is *additive* (fp16, randomk with a shared seed, low-rank factors), which
   gcbench adds (DESIGN §8): a compressed allreduce, and a compressed reduce-scatter
   paired with allgather.
3. *Operations*: a compression precedes a C phase that follows a U phase (or starts the
   option); a decompression follows a C phase that is followed by a U phase, or ends the
   option; between two C phases the payload is either *forwarded* (the next phase carries
   the payloads received, concatenated) or decompressed and recompressed. Each
   compression and decompression runs on the GPU or the CPU (Table 3's Comp/Decomp).

For a non-additive compressor this gives 174 paths (12 flat, 162 hierarchical) and
4,341 options with their placements (63 flat, 4,278 hierarchical). An unsplittable
compressor (dgc, topk) still reaches alltoall phases: it compresses per chunk (one
payload per destination) instead of splitting one payload; the simulator charges that.

Pure data: no torch, no ray. `gcbench.sim.iteration` executes any option.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from gcbench.errors import ConfigError

Level = Literal["flat", "intra", "inter"]
Place = Literal["gpu", "cpu"]
LEVELS: tuple[str, ...] = ("flat", "intra", "inter")


@dataclass(slots=True)
class Holding:
    """What one rank holds between two steps of an option: the interpreter's state.

    `e` dense elements per slice and `slices` distinct slices (a compressed allgather
    that closes a pair brings n slices, one per rank); `k` payloads (or dense pieces)
    per slice not summed yet; `held` the payload bytes held; `comp` whether the data is
    compressed now and `own` whether one of the payloads held is this rank's own (it has
    that contribution uncompressed, so it decompresses one fewer); `rings` the GPUs of a
    machine that send across machines in parallel; `summed` and `psum` how many
    workers' gradients were summed into the dense values and into each payload."""

    e: float
    rings: int
    slices: int = 1
    k: int = 1
    held: float = 0.0
    comp: bool = False
    own: bool = True
    summed: int = 1
    psum: int = 1


def _sum_payloads(h: Holding, n: int) -> None:
    """The group's payloads summed into one (additive payloads, or at the servers)."""
    h.k, h.own, h.psum = 1, False, h.psum * h.k * n


def _after_allreduce(h: Holding, n: int, second: bool, intra: bool, G: int) -> None:
    if h.comp:
        _sum_payloads(h, n)
    else:
        h.summed *= n


def _after_reduce_scatter(h: Holding, n: int, second: bool, intra: bool, G: int) -> None:
    if not h.comp:
        h.summed *= n
    h.e /= n
    if h.comp:  # additive payloads: each rank keeps its slice of their sum
        h.held, h.k, h.own, h.psum = h.held / n, 1, False, h.psum * h.k * n
    if intra:
        h.rings = G


def _after_alltoall(h: Holding, n: int, second: bool, intra: bool, G: int) -> None:
    h.e /= n  # each rank keeps one slice, with the n ranks' pieces of it to sum
    h.k *= n
    if intra:
        h.rings = G


def _after_allgather(h: Holding, n: int, second: bool, intra: bool, G: int) -> None:
    if not h.comp:
        h.e *= n  # the whole array of n shards
        return
    h.held *= n
    if second:  # the n ranks' slices (the pair's second step)
        h.slices *= n
    else:  # the n ranks' payloads of the same data, to sum
        h.k *= n


def _after_reduce(h: Holding, n: int, second: bool, intra: bool, G: int) -> None:
    if h.comp:  # the root holds every rank's payloads
        h.held *= n
        h.k *= n
    else:
        h.summed *= n
    if intra:  # one GPU of the machine (the root) goes on across machines
        h.rings = 1


def _after_gather(h: Holding, n: int, second: bool, intra: bool, G: int) -> None:
    if h.comp:  # the root holds every rank's payloads
        h.held *= n
        h.k *= n
    if intra:  # one GPU of the machine (the root) goes on across machines
        h.rings = 1


def _after_nothing(h: Holding, n: int, second: bool, intra: bool, G: int) -> None:
    """Broadcast: every rank holds what the root held (the rooted section closes)."""


After = Callable[[Holding, int, bool, bool, int], None]


@dataclass(frozen=True)
class Collective:
    """One row of the option interpreter: what a phase of this collective does. Read by
    the simulator's lowering (`iteration.lower`), `declared_wire_bytes` and the
    emulator (`cluster.execute`), so a collective is described here once.

    `second`: as the first step of a divisible pair, the second step it takes (pruning
    rule 3); `rooted`: to or from one root, rotating per bucket; `opens`/`closes`: a
    rooted section (reduce, gather ... broadcast) that the root runs for the group;
    `whole`: its size argument is the whole array of n shards (a dense allgather);
    `servers`: through the CPU summation servers; `rounds`: every rank has the group's
    sum after it, so a multi-round compressor (PowerSGD: P, then Q from the summed P) may
    run its rounds through it; `after`: what a rank holds after it
    (`Holding`), from the group size n, whether it closes a divisible pair, whether it
    runs inside one machine, and the machine's GPUs."""

    name: str
    short: str
    after: After
    second: str | None = None
    rooted: bool = False
    opens: bool = False
    closes: bool = False
    whole: bool = False
    servers: bool = False
    rounds: bool = False

    # The link-level collective (`comm.collectives`) a phase of payloads is costed as:
    # an allgather of payloads forwards every rank's payload whole (set once: a hot path)
    payload_link: str = field(init=False)

    def __post_init__(self) -> None:
        link = "allgather_payload" if self.name == "allgather" else self.name
        object.__setattr__(self, "payload_link", link)

    def link(self, compressed: bool) -> str:
        """The link-level collective a phase is costed as, compressed or not."""
        return self.payload_link if compressed else self.name

    def size(self, h: Holding, bpe: int, n: int) -> float:
        """The phase's size argument (`comm.collectives`): the payload bytes held, or the
        dense array (the whole of it for an allgather)."""
        if h.comp:
            return h.held
        return bpe * h.e * n if self.whole else bpe * h.e


COLLECTIVE_TABLE: dict[str, Collective] = {
    c.name: c
    for c in (
        Collective("allreduce", "ar", _after_allreduce, rounds=True),
        Collective("reduce_scatter", "rs", _after_reduce_scatter, "allgather", rounds=True),
        Collective("allgather", "ag", _after_allgather, whole=True),
        Collective("alltoall", "a2a", _after_alltoall, second="allgather"),
        Collective("reduce", "red", _after_reduce, "broadcast", rooted=True, opens=True),
        Collective("broadcast", "bc", _after_nothing, rooted=True, closes=True),
        Collective("gather", "ga", _after_gather, "broadcast", rooted=True, opens=True),
        # through the CPU summation servers (BytePS, DESIGN §7), across machines only:
        # push, the servers sum (compressed: decompress, sum, recompress), pull; or
        # BytePS's split between the servers and an allreduce among the machines
        Collective("pushpull", "ps", _after_allreduce, servers=True),
        Collective("byteps", "byteps", _after_allreduce, servers=True),
    )
}
COLLECTIVES: tuple[str, ...] = tuple(COLLECTIVE_TABLE)
SHORT = {c.name: c.short for c in COLLECTIVE_TABLE.values()}
LONG = {v: k for k, v in SHORT.items()}
# Pruning rule 3: a divisible scheme's first step fixes its second.
SECOND_STEP = {c.name: c.second for c in COLLECTIVE_TABLE.values() if c.second is not None}
ROOTED = frozenset(c.name for c in COLLECTIVE_TABLE.values() if c.rooted)


def second_steps(steps: tuple[Step, ...]) -> tuple[bool, ...]:
    """For each step of an option, whether it is the second step of a divisible pair:
    the pair its level opened last (`intra:rs inter:ag* intra:ag*`: the intra allgather
    closes the intra reduce-scatter's pair). Operations are never."""
    out = []
    opened: list[str] = []  # levels of the open pairs, innermost last
    for s in steps:
        if isinstance(s, Op):
            out.append(False)
            continue
        row = COLLECTIVE_TABLE[s.collective]
        closes = s.collective in SECOND_STEP.values() and bool(opened) and opened[-1] == s.level
        out.append(closes)
        if closes:
            opened.pop()
        elif row.second is not None and not row.rooted:
            opened.append(s.level)
    return tuple(out)


# Schemes through CPU summation servers (BytePS, DESIGN §7), across machines only:
# `pushpull` (PS: push to the servers, sum there, pull; compressed, the servers decompress,
# sum and recompress) and `byteps` (BytePS's split between the servers and an allreduce).
SERVER_SCHEMES = {False: ("pushpull", "byteps"), True: ("pushpull",)}


def indivisible(compressed: bool, additive: bool, servers: bool = False) -> tuple[str, ...]:
    """Table 2's one-collective schemes; additive payloads may also be allreduced; with
    CPU servers, the server schemes."""
    out: tuple[str, ...] = ("allreduce",) if not compressed else ("allgather",)
    if compressed and additive:
        out += ("allreduce",)
    return out + (SERVER_SCHEMES[compressed] if servers else ())


def first_steps(compressed: bool, additive: bool) -> tuple[str, ...]:
    """Table 3's Comm1 / Comm1_comp; additive payloads may also be reduce-scattered."""
    if not compressed:
        return ("reduce_scatter", "reduce")
    return ("alltoall", "gather", "reduce_scatter") if additive else ("alltoall", "gather")


@dataclass(frozen=True)
class Phase:
    level: Level
    collective: str
    compressed: bool = False

    @property
    def token(self) -> str:
        return f"{self.level}:{SHORT[self.collective]}{'*' if self.compressed else ''}"


@dataclass(frozen=True)
class Op:
    """A compression (`c`) or decompression (`d`) on the GPU or the CPU."""

    op: Literal["c", "d"]
    where: Place = "gpu"

    @property
    def token(self) -> str:
        return f"{self.where[0]}{self.op}"


Step = Phase | Op


@dataclass(frozen=True)
class Option:
    """One bucket's synchronisation: phases and the operations between them, in order."""

    steps: tuple[Step, ...]
    fp16: bool = False  # the uncompressed phases carry fp16 (a cast after backward, one back)

    @cached_property
    def name(self) -> str:
        return " ".join((["fp16"] if self.fp16 else []) + [s.token for s in self.steps])

    @cached_property
    def _hash(self) -> int:
        return hash((self.steps, self.fp16))

    def __hash__(self) -> int:  # computed once: options key the planner's caches
        return self._hash

    def __eq__(self, other: object) -> bool:
        """As the dataclass compares (steps, fp16), but two different options, which the
        planner compares often (re-fusing a candidate plan), part at their cached hashes
        without comparing every step."""
        if self is other:
            return True
        if not isinstance(other, Option):
            return NotImplemented
        return self._hash == other._hash and (self.steps, self.fp16) == (other.steps, other.fp16)

    def __str__(self) -> str:
        return self.name

    @property
    def phases(self) -> tuple[Phase, ...]:
        return tuple(s for s in self.steps if isinstance(s, Phase))

    @property
    def ops(self) -> tuple[Op, ...]:
        return tuple(s for s in self.steps if isinstance(s, Op))

    @property
    def compressed(self) -> bool:
        return any(p.compressed for p in self.phases)

    @property
    def hierarchical(self) -> bool:
        return any(p.level != "flat" for p in self.phases)

    @property
    def path(self) -> Option:
        """The same option with every operation on the GPU: its communication path."""
        return Option(tuple(Op(s.op) if isinstance(s, Op) else s for s in self.steps), self.fp16)

    @classmethod
    def parse(cls, text: str) -> Option:
        """Read the token form (`intra:rs gc inter:ag* gd intra:ag`). Raises ConfigError
        naming the bad token; the structure is checked by `check`."""
        tokens = text.split()
        fp16 = bool(tokens) and tokens[0] == "fp16"
        steps: list[Step] = []
        for tok in tokens[1:] if fp16 else tokens:
            if tok in ("gc", "cc", "gd", "cd"):
                steps.append(Op(tok[1], "gpu" if tok[0] == "g" else "cpu"))  # type: ignore[arg-type]
                continue
            level, sep, coll = tok.partition(":")
            compressed = coll.endswith("*")
            coll = coll.rstrip("*")
            if not sep or level not in LEVELS or coll not in LONG:
                raise ConfigError(
                    [
                        f"option {text!r}: bad token {tok!r}; a phase is level:collective "
                        f"(levels {', '.join(LEVELS)}; collectives {', '.join(LONG)}; * = "
                        "compressed), an operation gc, cc, gd or cd"
                    ]
                )
            steps.append(Phase(level, LONG[coll], compressed))  # type: ignore[arg-type]
        if not steps:
            raise ConfigError([f"option {text!r}: no phases"])
        return cls(tuple(steps), fp16)


def _structure_error(option: Option, additive: bool) -> str | None:
    """Why `option` breaks the enumeration rule (module docstring), or None."""
    phases = option.phases
    levels = [p.level for p in phases]
    if all(level == "flat" for level in levels):
        groups = [list(phases)]
    elif levels and levels[0] == "intra" and levels[-1] == "intra" and len(levels) >= 3:
        if any(level != "inter" for level in levels[1:-1]):
            return "a hierarchical option is intra, inter..., intra phases"
        groups = [[phases[0], phases[-1]], list(phases[1:-1])]
    else:
        return "phases are all flat, or intra, inter..., intra"
    for group in groups:
        if len(group) == 1:
            p = group[0]
            if p.level == "intra":
                return "intra-machine phases are always a divisible pair"
            if p.collective in SERVER_SCHEMES[False] and p.level != "inter":
                return f"{p.token}: CPU servers are reached across machines (level inter)"
            valid = indivisible(p.compressed, additive, servers=True)
            if p.collective not in valid:
                return _why_not(p, additive, valid, "alone")
        elif len(group) == 2:
            first, second = group
            if first.collective not in first_steps(first.compressed, additive):
                valid = first_steps(first.compressed, additive)
                return _why_not(first, additive, valid, "as a first step")
            if second.collective != SECOND_STEP[first.collective]:
                return (
                    f"{first.token} pairs with {SECOND_STEP[first.collective]}, "
                    f"not {second.collective} (ByteComp §4.2.2, pruning rule 3)"
                )
        else:
            return "a level has one collective or a divisible pair"
    return _ops_error(option)


def _why_not(p: Phase, additive: bool, valid: tuple[str, ...], where: str) -> str:
    if p.compressed and p.collective in ("allreduce", "reduce_scatter") and not additive:
        return (
            f"{p.token}: compressed data is allreduced or reduce-scattered only when the "
            "compressor is additive (its payloads sum to a valid payload)"
        )
    data = "compressed" if p.compressed else "uncompressed"
    return f"{p.token}: {data} data takes {' or '.join(valid)} {where} (ByteComp Table 3)"


def _ops_error(option: Option) -> str | None:
    """Operations sit exactly where rule 3 puts them."""
    state = False  # is the data compressed right now?
    steps = option.steps
    for i, s in enumerate(steps):
        if isinstance(s, Op):
            if s.op == "c" and state:
                return "a compression needs uncompressed data (decompress first)"
            if s.op == "d" and not state:
                return "a decompression needs compressed data"
            state = s.op == "c"
            continue
        prev = steps[i - 1] if i else None
        if s.compressed and not state:
            return f"{s.token} needs a compression before it"
        if not s.compressed and state:
            return f"{s.token} carries uncompressed data: decompress before it"
        if s.compressed and isinstance(prev, Op) and prev.op == "c":
            before = steps[i - 2] if i >= 2 else None
            if isinstance(before, Op) and before.op == "d":
                continue  # decompressed and recompressed between two C phases
            if isinstance(before, Phase) and before.compressed:
                return "between two compressed phases: forward, or gd/cd then gc/cc"
    if state:
        return "the option ends compressed: decompress at the end"
    for a, b in itertools.pairwise(steps):
        if isinstance(a, Op) and isinstance(b, Op) and not (a.op == "d" and b.op == "c"):
            return "only a decompression then a recompression may stand together"
    if option.fp16 and all(p.compressed for p in option.phases):
        return "fp16 casts the uncompressed phases, and this option has none"
    return None


def check(option: Option, *, additive: bool = False, compressor: str | None = None) -> None:
    """Raise ConfigError if `option` is not in the option space of a compressor with these
    properties (`compressor` names it in the message)."""
    why = _structure_error(option, additive)
    if why is not None:
        who = f" with {compressor}" if compressor else ""
        raise ConfigError([f"option {option.name!r}{who}: {why}"])


def _schemes(level: Level, additive: bool, servers: bool = False) -> Iterator[list[Phase]]:
    """Every phase list of one level: an indivisible collective or a divisible pair."""
    for c in (False, True):
        for coll in indivisible(c, additive, servers and level == "inter"):
            yield [Phase(level, coll, c)]
    for c in (False, True):
        for coll in first_steps(c, additive):
            for c2 in (False, True):
                yield [Phase(level, coll, c), Phase(level, SECOND_STEP[coll], c2)]


def _hierarchical(additive: bool, servers: bool = False) -> Iterator[list[Phase]]:
    for c in (False, True):
        for coll in first_steps(c, additive):
            for inter in _schemes("inter", additive, servers):
                for c2 in (False, True):
                    yield [Phase("intra", coll, c), *inter, Phase("intra", SECOND_STEP[coll], c2)]


def _paths(phases: list[Phase]) -> Iterator[tuple[Step, ...]]:
    """Rule 3: operations around the phases; a C phase after a C phase forwards or
    recompresses (two paths)."""
    partial: list[list[Step]] = [[]]
    for i, p in enumerate(phases):
        prev = phases[i - 1] if i else None
        nxt: list[list[Step]] = []
        for steps in partial:
            if p.compressed and (prev is None or not prev.compressed):
                nxt.append([*steps, Op("c"), p])
            elif p.compressed:
                nxt.append([*steps, p])  # forward
                nxt.append([*steps, Op("d"), Op("c"), p])  # decompress, recompress
            elif prev is not None and prev.compressed:
                nxt.append([*steps, Op("d"), p])
            else:
                nxt.append([*steps, p])
        partial = nxt
    for steps in partial:
        if phases[-1].compressed:
            steps.append(Op("d"))
        yield tuple(steps)


def _placements(path: tuple[Step, ...]) -> Iterator[Option]:
    slots = [i for i, s in enumerate(path) if isinstance(s, Op)]
    for places in itertools.product(("gpu", "cpu"), repeat=len(slots)):
        steps = list(path)
        for i, where in zip(slots, places, strict=True):
            op = path[i]
            assert isinstance(op, Op)
            steps[i] = Op(op.op, where)  # type: ignore[arg-type]
        yield Option(tuple(steps))


def enumerate_paths(
    *, additive: bool = False, flat: bool = True, hierarchical: bool = True, servers: bool = False
) -> list[Option]:
    """Every communication path (operations on the GPU), flat ones first; `servers` adds
    the inter-machine schemes through CPU servers (not in ByteComp's count)."""
    out: list[Option] = []
    if flat:
        for phases in _schemes("flat", additive):
            out.extend(Option(p) for p in _paths(phases))
    if hierarchical:
        for phases in _hierarchical(additive, servers):
            out.extend(Option(p) for p in _paths(phases))
    return out


def enumerate_options(
    *,
    additive: bool = False,
    flat: bool = True,
    hierarchical: bool = True,
    max_compressions: int | None = None,
    servers: bool = False,
) -> list[Option]:
    """The option space C: every path with every GPU/CPU placement of its operations.
    `max_compressions` is the user constraint of §4.2.2 (at most that many compressions
    per tensor)."""
    out: list[Option] = []
    paths = enumerate_paths(
        additive=additive, flat=flat, hierarchical=hierarchical, servers=servers
    )
    for path in paths:
        if max_compressions is not None:
            if sum(1 for o in path.ops if o.op == "c") > max_compressions:
                continue
        out.extend(_placements(path.steps))
    return out


def counts(*, additive: bool = False) -> dict[str, int]:
    """Paths and options, flat and hierarchical (for a non-additive compressor: 12 + 162
    paths, 63 + 4,278 options)."""
    out = {}
    for kind, flags in (("flat", (True, False)), ("hierarchical", (False, True))):
        out[f"{kind}_paths"] = len(
            enumerate_paths(additive=additive, flat=flags[0], hierarchical=flags[1])
        )
        out[f"{kind}_options"] = len(
            enumerate_options(additive=additive, flat=flags[0], hierarchical=flags[1])
        )
    out["paths"] = out["flat_paths"] + out["hierarchical_paths"]
    out["options"] = out["flat_options"] + out["hierarchical_options"]
    return out


# Named strategies of today, as options for every bucket (DESIGN §4 "baseline").
PRESETS: dict[str, Option] = {
    "fp32": Option.parse("flat:ar"),
    "fp32-2level": Option.parse("intra:rs inter:ar intra:ag"),
    "fp16": Option.parse("fp16 flat:ar"),
    "allgather": Option.parse("gc flat:ag* gd"),
    "allgather-2level": Option.parse("intra:rs gc inter:ag* gd intra:ag"),
    "allreduce": Option.parse("gc flat:ar* gd"),
    "ps": Option.parse("intra:rs inter:ps intra:ag"),
    "byteps": Option.parse("intra:rs inter:byteps intra:ag"),
    "byteps-compress": Option.parse("intra:rs gc inter:ps* gd intra:ag"),
}


def declared_wire_bytes(
    option: Option,
    elements: float,
    machines: int,
    gpus_per_machine: int,
    payload: Callable[[float], float],
    splittable: bool = True,
    servers: int = 0,
) -> float:
    """Mean bytes one GPU sends to synchronise a bucket of `elements` with `option`
    (all bytes on the wire / GPUs), from the option's phases alone: each phase's size
    argument (`gcbench.comm.collectives`) follows what a rank holds (`Holding`, as
    `COLLECTIVE_TABLE` changes it) and `gcbench.comm.wire_bytes` turns it into bytes
    sent. The simulator must put exactly these bytes on its streams."""
    from gcbench.comm import byteps_wire_bytes, wire_bytes

    M, G = machines, gpus_per_machine
    sizes = {"flat": M * G, "intra": G, "inter": M}
    if M * G <= 1:
        return 0.0
    bpe = 2 if option.fp16 else 4
    h = Holding(float(elements), G)
    total = 0.0
    steps = option.steps
    second = second_steps(steps)
    for i, s in enumerate(steps):
        if isinstance(s, Op):
            if s.op == "c":
                chunks = 1
                for t in steps[i + 1 :]:
                    if isinstance(t, Op):
                        break
                    if t.collective == "alltoall" and not splittable:
                        chunks *= sizes[t.level]
                h.held, h.comp = chunks * payload(h.e / chunks), True
            else:
                h.e, h.slices, h.k, h.comp = h.e * h.slices, 1, 1, False
            continue
        n = sizes[s.level]
        if n <= 1:
            continue
        row = COLLECTIVE_TABLE[s.collective]
        size = row.size(h, bpe, n)
        share = h.rings / G if s.level == "inter" else 1.0
        if s.collective == "pushpull":  # each GPU pushes what it holds (and pulls as much)
            total += size * share
        elif s.collective == "byteps":  # the machine's NICs carry BytePS's share of its rings'
            total += byteps_wire_bytes(size * h.rings, M, servers) / G
        else:
            total += wire_bytes(row.link(h.comp), size, n) * share
        row.after(h, n, second[i], s.level == "intra", G)
    return total
