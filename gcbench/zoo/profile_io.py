"""Profile files: write a ModelProfile as JSON, read it back, and import other formats.

The JSON format (`"format": "gcbench-profile"`, version 1; docs/profile-format.md):

    {"format": "gcbench-profile", "version": 1,
     "model": "resnet18-cifar", "batch_size": 32, "seq_len": null, "sample_unit": "images",
     "device": "cpu (x86_64, torch 2.13.0+cpu)", "source": "measured",
     "forward_s": 0.061, "update_s": 0.015,            # both optional on import
     "tensors": [{"name": "linear.bias", "shape": [10], "numel": 10, "layer": "linear",
                  "backward_s": 0.0004}, ...],         # gradient-ready order
     "notes": ["median of 5 iterations after 2 warm-up; ..."]}

Also accepted on import:
- CSV with a header and columns `name,numel,ready_s` (optional `shape` as `64x3x3x3`,
  `layer`): one row per tensor, `ready_s` = seconds from the start of backward until its
  gradient is ready. Batch size and model come from the suite (or the zoo's defaults).
- The ByteComp/Espresso profile collection (`{"models": {name: {"tensors": [[name, numel],
  ...], "ready_gap_us": [...]}}}`), selecting one model with `file.json#name`.

A file that lacks `forward_s` gets it estimated from FLOPs (`estimate_missing`), and the
profile's `notes` say so. Every malformed file is one ConfigError line naming the file.

Limits: a file is read only up to `MAX_PROFILE_BYTES` (`/dev/zero` is refused after that
many bytes, not read to the end); numbers are finite; a tensor and the whole model hold at
most `MAX_NUMEL` elements (4 TiB of fp32, so that any byte count the simulator derives
stays within 64 bits); batch size and sequence length are bounded as in suites.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from gcbench.errors import ConfigError
from gcbench.files import atomic_write, read_limited
from gcbench.zoo.catalog import ESPRESSO_MODELS, MODELS
from gcbench.zoo.profile import ModelProfile, TensorProfile

FORMAT = "gcbench-profile"
VERSION = 1

MAX_PROFILE_BYTES = 32 * 1024 * 1024  # the Espresso collection of 9 models is 105 kB
MAX_NUMEL = 2**40  # elements per tensor and per model
MAX_BATCH = 2**20  # per-GPU batch (suites too)
MAX_SEQ_LEN = 2**16  # sequence length (suites too)
MAX_SECONDS = 1e6  # any one time in a profile (11 days)


def to_json(profile: ModelProfile) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "model": profile.name,
        "batch_size": profile.batch_size,
        "seq_len": profile.seq_len,
        "sample_unit": profile.sample_unit,
        "device": profile.device,
        "source": profile.source,
        "forward_s": profile.forward_s,
        "update_s": profile.update_s,
        "tensors": [
            {
                "name": t.name,
                "shape": list(t.shape),
                "numel": t.numel,
                "layer": t.layer,
                "backward_s": t.backward_s,
            }
            for t in profile.tensors
        ],
        "notes": list(profile.notes),
    }


def write_profile(profile: ModelProfile, path: Path) -> None:
    atomic_write(path, (json.dumps(to_json(profile), indent=1) + "\n").encode())


class _Bad(Exception):
    pass


def _number(value: Any, what: str, minimum: float = 0.0, maximum: float = MAX_SECONDS) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _Bad(f"{what} must be a number, got {value!r}")
    if value < minimum:
        raise _Bad(f"{what} must be >= {minimum:g}, got {value!r}")
    if value > maximum:
        raise _Bad(f"{what} must be at most {maximum:g}, got {value!r}")
    return float(value)


def _count(value: Any, what: str, minimum: int = 0, maximum: int = MAX_NUMEL) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise _Bad(f"{what} must be an integer >= {minimum}, got {value!r}")
    if value > maximum:
        raise _Bad(f"{what} must be at most {maximum:,}, got {value:,}")
    return value


def _check_total(profile: ModelProfile) -> ModelProfile:
    total = sum(t.numel for t in profile.tensors)
    if total > MAX_NUMEL:
        raise _Bad(f"the tensors hold {total:,} elements in all; at most {MAX_NUMEL:,}")
    return profile


def _tensor(i: int, item: Any) -> TensorProfile:
    where = f"tensors[{i}]"
    if not isinstance(item, dict):
        raise _Bad(f"{where} must be an object with name, numel and backward_s")
    unknown = set(item) - {"name", "shape", "numel", "layer", "backward_s"}
    if unknown:
        raise _Bad(f"{where}: unknown key {sorted(unknown)[0]!r}")
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise _Bad(f"{where}.name must be a non-empty string")
    numel = _count(item.get("numel"), f"{where}.numel")
    shape_raw = item.get("shape", [numel])
    if not isinstance(shape_raw, list):
        raise _Bad(f"{where}.shape must be a list of integers")
    shape = tuple(_count(s, f"{where}.shape") for s in shape_raw)
    if math.prod(shape) != numel:
        raise _Bad(f"{where}: shape {list(shape)} holds {math.prod(shape)} elements, not {numel}")
    layer = item.get("layer", name.rsplit(".", 1)[0])
    if not isinstance(layer, str):
        raise _Bad(f"{where}.layer must be a string")
    backward = _number(item.get("backward_s"), f"{where}.backward_s")
    return TensorProfile(name, shape, numel, layer, backward)


def _from_gcbench(data: dict[str, Any]) -> ModelProfile:
    if data.get("version") != VERSION:
        raise _Bad(f"unsupported version {data.get('version')!r} (this gcbench reads {VERSION})")
    known = {
        "format", "version", "model", "batch_size", "seq_len", "sample_unit", "device",
        "source", "forward_s", "update_s", "tensors", "notes",
    }  # fmt: skip
    unknown = set(data) - known
    if unknown:
        raise _Bad(f"unknown key {sorted(unknown)[0]!r}")
    model = data.get("model")
    if not isinstance(model, str) or not model:
        raise _Bad("model must be a non-empty string")
    tensors = data.get("tensors")
    if not isinstance(tensors, list) or not tensors:
        raise _Bad("tensors must be a non-empty list")
    unit = data.get("sample_unit", MODELS[model].sample_unit if model in MODELS else "samples")
    if unit not in ("images", "tokens", "samples"):
        raise _Bad(f"sample_unit must be images, tokens or samples, got {unit!r}")
    seq = data.get("seq_len")
    notes = data.get("notes", [])
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        raise _Bad("notes must be a list of strings")
    forward = data.get("forward_s")
    update = data.get("update_s")
    return ModelProfile(
        model,
        _count(data.get("batch_size"), "batch_size", 1, MAX_BATCH),
        None if seq is None else _count(seq, "seq_len", 1, MAX_SEQ_LEN),
        unit,
        str(data.get("device", "unknown")),
        math.nan if forward is None else _number(forward, "forward_s"),
        math.nan if update is None else _number(update, "update_s"),
        tuple(_tensor(i, t) for i, t in enumerate(tensors)),
        source=str(data.get("source", "imported")),
        notes=tuple(notes),
    )


def _from_espresso(data: dict[str, Any], selector: str | None, path: Path) -> ModelProfile:
    models = data["models"]
    if not isinstance(models, dict) or not models:
        raise _Bad("models must be a non-empty object")
    if selector is None:
        raise _Bad(f"holds several models; pick one with {path.name}#NAME ({', '.join(models)})")
    if selector not in models:
        raise _Bad(f"no model {selector!r}; it holds {', '.join(models)}")
    entry = models[selector]
    names = entry.get("tensors") if isinstance(entry, dict) else None
    gaps = entry.get("ready_gap_us") if isinstance(entry, dict) else None
    if not isinstance(names, list) or not isinstance(gaps, list) or len(names) != len(gaps):
        raise _Bad(f"{selector}: tensors and ready_gap_us must be lists of equal length")
    tensors = []
    for i, (item, gap) in enumerate(zip(names, gaps, strict=True)):
        if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
            raise _Bad(f"{selector}.tensors[{i}] must be [name, numel]")
        numel = _count(item[1], f"{selector}.tensors[{i}][1]")
        us = _number(gap, f"{selector}.ready_gap_us[{i}]", maximum=MAX_SECONDS * 1e6)
        tensors.append(TensorProfile(item[0], (numel,), numel, item[0].rsplit(".", 1)[0], us / 1e6))
    zoo = ESPRESSO_MODELS.get(selector, selector)
    info = MODELS.get(zoo)
    return ModelProfile(
        zoo,
        info.batch_size if info else 1,
        info.seq_len if info else None,
        info.sample_unit if info else "samples",
        str(data.get("device", "unknown")),
        math.nan,
        math.nan,
        tuple(tensors),
        source="imported",
        notes=(
            f"{path.name}#{selector}: ready gaps; batch size "
            + ("as the zoo pins it" if info else "unknown, taken as 1"),
        ),
    )


CSV_COLUMNS = ("name", "numel", "ready_s", "shape", "layer")


def _from_csv(text: str) -> ModelProfile:
    """Rows of `name,numel,ready_s[,shape][,layer]` under a header; every row has as many
    fields as the header (a short or long row is an error naming its line)."""
    reader = csv.reader(io.StringIO(text))
    header: list[str] | None = None
    tensors = []
    previous = 0.0
    try:
        for row in reader:
            line = reader.line_num
            if not row or (len(row) == 1 and not row[0].strip()):
                continue  # blank line
            if header is None:
                header = [h.strip() for h in row]
                missing = [c for c in ("name", "numel", "ready_s") if c not in header]
                if missing:
                    raise _Bad(f"missing column {missing[0]!r} (need name, numel, ready_s)")
                unknown = [h for h in header if h not in CSV_COLUMNS]
                if unknown:
                    raise _Bad(
                        f"line {line}: unknown column {unknown[0]!r} "
                        f"(columns: {', '.join(CSV_COLUMNS)})"
                    )
                twice = [h for h in header if header.count(h) > 1]
                if twice:
                    raise _Bad(f"line {line}: column {twice[0]!r} appears twice")
                continue
            if len(row) != len(header):
                raise _Bad(
                    f"line {line}: {len(row)} field{'s' if len(row) != 1 else ''}, but the "
                    f"header has {len(header)} ({','.join(header)})"
                )
            tensor, previous = _csv_tensor(dict(zip(header, row, strict=True)), line, previous)
            tensors.append(tensor)
    except csv.Error as e:
        raise _Bad(f"line {reader.line_num}: not valid CSV: {e}") from None
    if not tensors:
        raise _Bad("no rows (expected a header name,numel,ready_s and one row per tensor)")
    return ModelProfile(
        "imported", 1, None, "samples", "unknown", math.nan, math.nan, tuple(tensors), "imported"
    )


def _csv_tensor(row: dict[str, str], line: int, previous: float) -> tuple[TensorProfile, float]:
    """One row's tensor, and its ready time (the next row's `previous`)."""
    name = row["name"].strip()
    if not name:
        raise _Bad(f"line {line}: name is empty")
    try:
        numel = int(row["numel"])
    except ValueError:
        raise _Bad(f"line {line}: numel must be an integer, got {row['numel']!r}") from None
    try:
        ready = float(row["ready_s"])
    except ValueError:
        raise _Bad(f"line {line}: ready_s must be a number, got {row['ready_s']!r}") from None
    if not 0 <= numel <= MAX_NUMEL:
        raise _Bad(f"line {line}: numel must be between 0 and {MAX_NUMEL:,}, got {numel:,}")
    if not math.isfinite(ready) or ready < previous or ready > MAX_SECONDS:
        raise _Bad(
            f"line {line}: ready_s must not decrease and must be at most {MAX_SECONDS:g}, "
            f"got {ready!r}"
        )
    text = row.get("shape", "").strip()
    try:
        shape = tuple(int(s) for s in text.split("x")) if text else (numel,)
    except ValueError:
        raise _Bad(f"line {line}: shape must look like 64x3x7x7, got {text!r}") from None
    if any(s < 0 for s in shape):
        raise _Bad(f"line {line}: shape {text} has a negative dimension")
    if math.prod(shape) != numel:
        raise _Bad(f"line {line}: shape {text} does not hold {numel} elements")
    layer = row.get("layer", "").strip() or name.rsplit(".", 1)[0]
    return TensorProfile(name, shape, numel, layer, ready - previous), ready


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Bad(f"key {key!r} appears twice in one object")
        out[key] = value
    return out


def read_profile(spec: str | Path) -> ModelProfile:
    """Read a profile file (`path` or `path#model` for a collection). Missing forward and
    update times are NaN here; `estimate_missing` fills them."""
    return read_profile_digest(spec)[0]


def read_profile_digest(spec: str | Path) -> tuple[ModelProfile, str]:
    """`read_profile` and the sha256 of the bytes it read (the file is read once)."""
    path_part, _, selector = str(spec).partition("#")
    path = Path(path_part)
    raw = read_limited(path, MAX_PROFILE_BYTES, "profile")
    return _parse(raw, path, selector), hashlib.sha256(raw).hexdigest()


def _parse(raw: bytes, path: Path, selector: str) -> ModelProfile:
    try:
        text = raw.decode("utf-8")
        if path.suffix.lower() == ".csv":
            return _check_total(_from_csv(text))
        try:
            data = json.loads(text, object_pairs_hook=_unique_keys)
        except json.JSONDecodeError as e:
            raise _Bad(f"line {e.lineno}: not valid JSON: {e.msg}") from None
        except RecursionError:
            raise _Bad("not valid JSON: nested too deeply") from None
        if not isinstance(data, dict):
            raise _Bad("must be a JSON object")
        if "models" in data:
            return _check_total(_from_espresso(data, selector or None, path))
        if data.get("format") != FORMAT:
            raise _Bad(f'not a gcbench profile (expected "format": "{FORMAT}")')
        return _check_total(_from_gcbench(data))
    except UnicodeDecodeError:
        raise ConfigError([f"{path}: not UTF-8 text"]) from None
    except _Bad as e:
        raise ConfigError([f"{path}: {e}"]) from None


def estimate_missing(profile: ModelProfile, device: str = "v100") -> ModelProfile:
    """Fill a missing forward or update time, saying so in `notes`.

    Forward: for a zoo model, the FLOP-based forward on `device` scaled by the ratio of the
    file's backward to the FLOP-based backward (so it matches the measured GPU's speed);
    otherwise half the backward, the FLOP ratio of a forward to its backward.
    Update: SGD with momentum over the file's parameters at `device`'s memory bandwidth.
    """
    forward, update, notes = profile.forward_s, profile.update_s, list(profile.notes)
    if math.isnan(forward):
        if profile.name in MODELS:
            from gcbench.zoo.profile import model_profile

            flops = model_profile(profile.name, profile.batch_size, device, profile.seq_len)
            forward = flops.forward_s * profile.backward_s / flops.backward_s
            notes.append(
                f"forward_s estimated from FLOPs: {device} FLOP profile scaled by the file's "
                "backward time"
            )
        else:
            forward = profile.backward_s / 2
            notes.append("forward_s estimated from FLOPs: half the backward time")
    if math.isnan(update):
        from gcbench.zoo.devices import DEVICES
        from gcbench.zoo.profile import update_seconds

        update = update_seconds([t.numel for t in profile.tensors], DEVICES[device])
        notes.append(f"update_s estimated: SGD with momentum at {device} memory bandwidth")
    return replace(profile, forward_s=forward, update_s=update, notes=tuple(notes))


@lru_cache(maxsize=64)
def file_profile(
    spec: str, digest: str | None, name: str, batch: int, seq: int | None, device: str
) -> ModelProfile:
    """A suite model's profile read from a file (cached per file content), labelled with the
    suite's model name and batch, its missing times estimated on `device`."""
    del digest  # part of the cache key only: a changed file is read again
    p = read_profile(spec)
    unit = MODELS[name].sample_unit if name in MODELS else p.sample_unit
    p = replace(p, name=name, batch_size=batch, seq_len=seq, sample_unit=unit)
    return estimate_missing(p, device)
