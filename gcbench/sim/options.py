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
from dataclasses import dataclass
from functools import cached_property
from typing import Literal

from gcbench.errors import ConfigError

Level = Literal["flat", "intra", "inter"]
Place = Literal["gpu", "cpu"]
LEVELS: tuple[str, ...] = ("flat", "intra", "inter")
COLLECTIVES: tuple[str, ...] = (
    "allreduce",
    "reduce_scatter",
    "allgather",
    "alltoall",
    "reduce",
    "broadcast",
    "gather",
    "pushpull",
    "byteps",
)
SHORT = {
    "allreduce": "ar",
    "reduce_scatter": "rs",
    "allgather": "ag",
    "alltoall": "a2a",
    "reduce": "red",
    "broadcast": "bc",
    "gather": "ga",
    "pushpull": "ps",
    "byteps": "byteps",
}
LONG = {v: k for k, v in SHORT.items()}
# Pruning rule 3: a divisible scheme's first step fixes its second.
SECOND_STEP = {
    "reduce_scatter": "allgather",
    "alltoall": "allgather",
    "reduce": "broadcast",
    "gather": "broadcast",
}
ROOTED = frozenset({"reduce", "gather", "broadcast"})


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
    argument (`gcbench.comm.collectives`) follows the data — dense elements shrink by n in
    a reduce-scatter or alltoall and grow by n in an allgather; payloads multiply when
    gathered, allgathered or forwarded — and `gcbench.comm.wire_bytes` turns it into bytes
    sent. The simulator must put exactly these bytes on its streams."""
    from gcbench.comm import byteps_wire_bytes, wire_bytes

    M, G = machines, gpus_per_machine
    sizes = {"flat": M * G, "intra": G, "inter": M}
    if M * G <= 1:
        return 0.0
    bpe = 2 if option.fp16 else 4
    e, held, comp, rings, total = float(elements), 0.0, False, G, 0.0
    steps = option.steps
    prev: Phase | None = None
    for i, s in enumerate(steps):
        if isinstance(s, Op):
            if s.op == "c":
                chunks = 1
                for t in steps[i + 1 :]:
                    if isinstance(t, Op):
                        break
                    if t.collective == "alltoall" and not splittable:
                        chunks *= sizes[t.level]
                held, comp = chunks * payload(e / chunks), True
            else:
                comp = False
            continue
        n = sizes[s.level]
        is_second = prev is not None and prev.level == s.level and (
            SECOND_STEP.get(prev.collective) == s.collective
        )
        prev = s
        if n <= 1:
            continue
        name = "allgather_payload" if comp and s.collective == "allgather" else s.collective
        size = held if comp else bpe * e * (n if s.collective == "allgather" else 1)
        share = rings / G if s.level == "inter" else 1.0
        coll = s.collective
        if coll == "pushpull":  # each GPU pushes what it holds (and pulls as much)
            total += size * share
            continue
        if coll == "byteps":  # the machine's NICs carry BytePS's share of its rings' data
            total += byteps_wire_bytes(size * rings, M, servers) / G
            continue
        total += wire_bytes(name, size, n) * share
        if coll in ("reduce_scatter", "alltoall"):
            e /= n
            held = held / n if comp and coll == "reduce_scatter" else held
            rings = G if s.level == "intra" else rings
        elif coll in ("reduce", "gather"):
            held *= n if comp else 1
            rings = 1 if s.level == "intra" else rings
        elif coll == "allgather":
            if comp:
                held *= n
                if is_second:
                    e *= n  # distinct slices: the dense result is n times larger
            else:
                e *= n
    return total
