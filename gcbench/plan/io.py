"""Plan files: `gcbench simulate --plan PLAN.json` times any plan.

Accepted:

- the plan record gcbench writes (`gcbench plan --json` prints it under "plan"; `gcbench
  run` stores it as `plans/<cell-id>.json.gz`), format `gcbench-plan`, version 1: its
  tensors must be the cell's model's, by name and in gradient order, and its buckets
  must cover them in that order;
- the ByteComp authors' planner output (Espresso, `byteps/torch/mergeComp/scheduler/`,
  `Simulator.json_dump_options`): parallel lists "tensor names", "tensor sizes" and
  "options" (one integer code a tensor, gradient order). Their tensor names come from
  their model code, so tensors are matched by name where every name matches, else by
  position where every size matches; the options then fuse under the cell's fusion
  policy (`greedy.fused_plan`). Codes 0-10 map to gcbench options (`ESPRESSO_CODES`, read
  from their `communicator/pool_bytecomp.py`); any other code is refused by name.

Every option must be in the compressor's option space (`sim.options.check`). Any mistake
is one ConfigError line naming the file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gcbench.errors import ConfigError
from gcbench.files import gunzip_limited, read_limited
from gcbench.sim.iteration import Plan
from gcbench.sim.options import Option, check
from gcbench.zoo.profile import ModelProfile

MAX_BYTES = 64 * 2**20  # a plan of a million tensors is well under this


def _load(path: Path) -> Any:
    raw = read_limited(path, MAX_BYTES, "plan")
    try:
        data = json.loads(gunzip_limited(raw, MAX_BYTES, str(path), "plan"))
    except json.JSONDecodeError as e:  # at its line, as every file gcbench reads
        raise ConfigError([f"{path}:{e.lineno}: not JSON ({e.msg}, column {e.colno})"]) from None
    except (OSError, EOFError, ValueError) as e:
        raise ConfigError([f"{path}: not JSON ({str(e).splitlines()[0]})"]) from None
    if isinstance(data, dict) and "plan" in data and "format" not in data:
        data = data["plan"]  # `gcbench plan --json` output
    return data


# The authors' per-tensor codes (their communicator/pool_bytecomp.py) as gcbench options.
ESPRESSO_CODES: dict[int, str] = {
    0: "flat:ar",  # FP32 allreduce
    1: "fp16 flat:ar",  # FP16 allreduce
    # intra reduce-scatter, compress, inter gather to a root, decompress and recompress,
    # inter broadcast, decompress, intra allgather
    2: "intra:rs gc inter:ga* gd gc inter:bc* gd intra:ag",
    # intra reduce-scatter, compress, inter alltoall, decompress and recompress, inter
    # allgather, decompress, intra allgather
    3: "intra:rs gc inter:a2a* gd gc inter:ag* gd intra:ag",
    4: "intra:rs gc inter:ag* gd intra:ag",  # HiTopKComm
    # BytePS CPU compression: fp16, intra reduce, CPU compress, push/pull, intra broadcast
    5: "fp16 intra:red cc inter:ps* cd intra:bc",
    # compress, intra alltoall, decompress and recompress, inter gather and broadcast,
    # intra allgather of the compressed data, decompress
    6: "gc intra:a2a* gd gc inter:ga* gd gc inter:bc* intra:ag* gd",
    # as 6 with an inter alltoall and allgather
    7: "gc intra:a2a* gd gc inter:a2a* gd gc inter:ag* intra:ag* gd",
    # compress, intra gather, decompress and recompress, inter allgather, intra broadcast
    8: "gc intra:ga* gd gc inter:ag* intra:bc* gd",
    # compress, intra alltoall, decompress and recompress, inter allgather, intra allgather
    9: "gc intra:a2a* gd gc inter:ag* intra:ag* gd",
    10: "gc flat:ag* gd",  # allgather of the compressed tensor over every GPU
}


def _espresso(path: Path, data: dict[str, Any], profile: ModelProfile) -> list[Option]:
    """The options of the authors' planner output, one a tensor of `profile`."""
    try:
        names = [str(n) for n in data["tensor names"]]
        sizes = [int(n) for n in data["tensor sizes"]]
        codes = [int(c) for c in data["options"]]
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError([f"{path}: malformed Espresso plan ({type(e).__name__}: {e})"]) from None
    if not len(names) == len(sizes) == len(codes):
        raise ConfigError([f"{path}: tensor names, tensor sizes and options differ in length"])
    ours = profile.tensors
    if names == [t.name for t in ours]:
        pass
    elif sizes != [t.numel for t in ours]:
        raise ConfigError(
            [
                f"{path}: its {len(names)} tensors match {profile.name}'s {len(ours)} "
                "neither by name nor by size in gradient order"
            ]
        )
    for code in sorted(set(codes)):
        if code not in ESPRESSO_CODES:
            raise ConfigError(
                [f"{path}: option code {code} is not one gcbench maps (it maps 0-10)"]
            )
    return [Option.parse(ESPRESSO_CODES[c]) for c in codes]


def read_plan_file(
    path: str | Path,
    profile: ModelProfile,
    *,
    additive: bool,
    compressor: str,
    fusion: str = "ddp",
) -> Plan:
    """The Plan in `path` for `profile`, checked against the compressor's option space."""
    path = Path(path)
    data = _load(path)
    if isinstance(data, dict) and "tensor names" in data and "options" in data:
        from gcbench.plan.greedy import fused_plan

        coded = _espresso(path, data, profile)
        for option in dict.fromkeys(coded):
            try:
                check(option, additive=additive, compressor=compressor)
            except ConfigError as e:
                raise ConfigError([f"{path}: {e.messages[0]}"]) from None
        return fused_plan(profile, coded, fusion)
    if not isinstance(data, dict) or data.get("format") != "gcbench-plan":
        raise ConfigError(
            [f"{path}: not a gcbench plan (\"format\": \"gcbench-plan\") nor an Espresso one"]
        )
    if data.get("version") != 1:
        raise ConfigError([f"{path}: plan version {data.get('version')!r}; this gcbench reads 1"])
    try:
        names = [str(t["name"]) for t in data["tensors"]]
        buckets = [[int(i) for i in b["tensors"]] for b in data["buckets"]]
        texts = [str(b["option"]) for b in data["buckets"]]
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError([f"{path}: malformed plan ({type(e).__name__}: {e})"]) from None
    want = [t.name for t in profile.tensors]
    if names != want:
        first = next(
            (i for i, (a, b) in enumerate(zip(names, want, strict=False)) if a != b),
            min(len(names), len(want)),
        )
        raise ConfigError(
            [
                f"{path}: the plan's {len(names)} tensors are not {profile.name}'s "
                f"{len(want)} (first difference at tensor {first})"
            ]
        )
    if [i for b in buckets for i in b] != list(range(len(want))):
        raise ConfigError(
            [f"{path}: the buckets must hold every tensor once, in gradient order"]
        )
    options: list[Option | None] = []
    for text in texts:
        try:
            option = Option.parse(text)
            check(option, additive=additive, compressor=compressor)
        except ConfigError as e:
            raise ConfigError([f"{path}: {e.messages[0]}"]) from None
        options.append(option)
    return Plan(buckets, options)
