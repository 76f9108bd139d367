"""Load a YAML file safely and report every mistake as `file:line: dotted.path: message`.

The file is read up to `MAX_BYTES` (never further: `/dev/zero` is refused at once) and
composed into a node tree (`yaml.compose`), which keeps line numbers; the tree is checked
for non-standard tags, alias expansion (a "billion laughs" file is rejected before
anything walks it), keys given twice in one mapping (YAML would keep the last silently)
and strings that cannot be stored as UTF-8, then constructed with the safe constructor
and validated with pydantic. Each pydantic error's `loc` is walked down the node tree to
find its line (STYLE §9).
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from gcbench.errors import ConfigError
from gcbench.files import read_limited

M = TypeVar("M", bound=BaseModel)

MAX_BYTES = 4 * 1024 * 1024
MAX_NODES = 100_000  # after alias expansion; real suites have a few hundred
SAFE_TAGS = {
    "tag:yaml.org,2002:" + t
    for t in ("str", "int", "float", "bool", "null", "seq", "map", "merge", "timestamp")
}


def read_yaml(
    path: str | Path, what: str = "suite", limit: int = MAX_BYTES
) -> tuple[Any, yaml.Node]:
    """The file's data and its node tree. Raises ConfigError with one clear line. `what`
    names the kind of file in messages, `limit` its bytes (a longer file: not further)."""
    raw = read_limited(path, limit, what)
    return parse_yaml(raw, str(path))


def parse_yaml(raw: bytes, where: str) -> tuple[Any, yaml.Node]:
    """`read_yaml` of a file's bytes (`where` names it in the errors): every YAML file
    gcbench reads goes through these checks."""
    try:  # PyYAML's composer and constructor recurse once per level of nesting
        return _parse_yaml(raw, where)
    except RecursionError:
        raise ConfigError(
            f"{where}: values nested too deeply (lists or mappings hundreds of levels down); "
            "a suite or profile needs a few"
        ) from None


def _parse_yaml(raw: bytes, where: str) -> tuple[Any, yaml.Node]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ConfigError(
            f"{where}:{line}: not UTF-8 text (byte 0x{raw[e.start]:02x} at offset {e.start}); "
            "save the file as UTF-8"
        ) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else 1
        what = " ".join(str(x) for x in (e.context, e.problem) if x)
        raise ConfigError(f"{where}:{line}: invalid YAML: {what}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{where}: invalid YAML: {e}") from None
    if node is None:
        raise ConfigError(
            f"{where}:1: the file is empty; expected a mapping (see `gcbench schema`)"
        )
    # aliases may expand a file to more values than its bytes could write out: a file's
    # own values need two bytes each at least, so beyond that (and MAX_NODES) a bomb
    _check_tree(node, where, max(MAX_NODES, len(raw)))
    loader = yaml.SafeLoader("")
    try:
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as e:
        line = e.problem_mark.line + 1 if e.problem_mark else 1
        raise ConfigError(f"{where}:{line}: {e.problem}") from None
    finally:
        loader.dispose()
    return data, node


_SURROGATE = re.compile("[\ud800-\udfff]")
MERGE_TAG = "tag:yaml.org,2002:merge"


def _check_tree(root: yaml.Node, where: str, max_nodes: int) -> None:
    """Reject unsafe tags, recursive aliases and alias bombs, in time linear in the file;
    then keys given twice in a mapping (all of them at once) and lone surrogates."""
    size: dict[int, int] = {}
    active: set[int] = set()
    problems: list[str] = []
    keys = yaml.SafeLoader("")  # constructs scalar keys, so `1` and `0x1` are one key

    def visit(node: yaml.Node, path: tuple[Any, ...]) -> int:
        key = id(node)
        if key in size:
            return size[key]
        if key in active:
            raise ConfigError(f"{where}:{node.start_mark.line + 1}: recursive YAML alias")
        if node.tag not in SAFE_TAGS:
            raise ConfigError(
                f"{where}:{node.start_mark.line + 1}: unsupported YAML tag {node.tag!r}; "
                "suites are plain YAML (no !!python or custom tags)"
            )
        active.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(visit(child, (*path, i)) for i, child in enumerate(node.value))
        elif isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for k, v in node.value:
                total += visit(k, path)
                name = _key(keys, k)
                if name is not None:
                    line = k.start_mark.line + 1
                    if name in seen:
                        dotted = ".".join(str(x) for x in (*path, name))
                        problems.append(
                            f"{where}:{line}: {dotted}: key given twice (first on line "
                            f"{seen[name]}); a key may appear once in a mapping"
                        )
                    else:
                        seen[name] = line
                total += visit(v, (*path, name if name is not None else "?"))
        elif isinstance(node, yaml.ScalarNode) and _SURROGATE.search(node.value):
            problems.append(
                f"{where}:{node.start_mark.line + 1}: a string holds a lone surrogate "
                "(\\ud800-\\udfff escape), which is not text; write the character itself"
            )
        active.discard(key)
        if total > max_nodes:
            raise ConfigError(
                f"{where}:{node.start_mark.line + 1}: YAML aliases expand to more than "
                f"{max_nodes:,} values (an alias bomb?)"
            )
        size[key] = total
        return total

    try:
        visit(root, ())
    finally:
        keys.dispose()
    if problems:
        raise ConfigError(sorted(problems, key=_line_of))


def _key(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    """A mapping key as Python sees it (None for merge keys and non-scalar keys)."""
    if not isinstance(node, yaml.ScalarNode) or node.tag == MERGE_TAG:
        return None
    if node.tag == "tag:yaml.org,2002:str":
        return node.value
    try:
        return loader.construct_object(node)
    except yaml.YAMLError:
        return node.value


def load_model(
    path: str | Path, model: type[M], what: str = "suite", limit: int = MAX_BYTES
) -> M:
    """Read and validate `path` as `model`, reporting every validation error by line
    (`what`, `limit`: as `read_yaml`)."""
    data, node = read_yaml(path, what, limit)
    if not isinstance(data, dict):
        raise ConfigError(
            f"{path}:{node.start_mark.line + 1}: expected a mapping at the top level, "
            f"got {type(data).__name__}"
        )
    try:
        return model.model_validate(data, context={"base_dir": Path(path).parent})
    except ValidationError as e:
        lines = [format_error(str(path), node, err, model) for err in e.errors()]
        raise ConfigError(sorted(lines, key=_line_of)) from None


def locate(node: yaml.Node, loc: tuple[Any, ...]) -> tuple[int, str]:
    """Walk `loc` down the node tree: (1-based line, dotted path of the keys that exist).

    Items of `loc` that name no key (pydantic adds union tags such as `topk` or
    `function-before[...]`) are skipped, except a last item, which is a missing or unknown
    key of the mapping reached so far.
    """
    path: list[str] = []
    line = node.start_mark.line + 1
    for i, item in enumerate(loc):
        last = i == len(loc) - 1
        if isinstance(node, yaml.MappingNode):
            for k, v in node.value:
                if isinstance(k, yaml.ScalarNode) and k.value == str(item):
                    path.append(str(item))
                    line = k.start_mark.line + 1
                    node = v
                    break
            else:
                if last:
                    path.append(str(item))
                continue
        elif isinstance(node, yaml.SequenceNode) and isinstance(item, int):
            if 0 <= item < len(node.value):
                path.append(str(item))
                node = node.value[item]
                line = node.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and last:
            continue
        else:
            # A scalar that a validator expanded (e.g. a preset name): stay on its line.
            continue
    return line, ".".join(path)


_OPS = {
    "greater_than": ("must be >", "gt"),
    "greater_than_equal": ("must be ≥", "ge"),
    "less_than": ("must be <", "lt"),
    "less_than_equal": ("must be ≤", "le"),
}


def _all_field_names(model: type[BaseModel]) -> dict[str, list[str]]:
    """Every field name in `model` and the models it nests, each with the keys of the
    sections it appears in, nearest the top first ("" for `model`'s own; for 'did you
    mean' and 'it belongs under')."""
    seen: dict[str, list[str]] = {}
    queue: list[tuple[type[BaseModel], str]] = [(model, "")]
    done: set[type] = set()
    while queue:
        m, home = queue.pop(0)
        if m in done:
            continue
        done.add(m)
        for name, field in m.model_fields.items():
            if home not in seen.setdefault(name, []):
                seen[name].append(home)
            for t in _nested_models(field.annotation):
                queue.append((t, name))
    return seen


def _nested_models(annotation: Any) -> list[type[BaseModel]]:
    out: list[type[BaseModel]] = []
    stack = [annotation]
    while stack:
        a = stack.pop()
        if isinstance(a, type) and issubclass(a, BaseModel):
            out.append(a)
        stack.extend(getattr(a, "__args__", ()) or ())
        stack.extend(getattr(a, "__metadata__", ()) or ())
        origin = getattr(a, "__origin__", None)
        if origin is not None and origin is not a:
            stack.append(origin)
    return out


def format_error(where: str, root: yaml.Node, err: Any, model: type[BaseModel]) -> str:
    line, path = locate(root, tuple(err["loc"]))
    msg = message(err, model)
    return f"{where}:{line}: {path}: {msg}" if path else f"{where}:{line}: {msg}"


def message(err: Any, model: type[BaseModel] | None = None) -> str:
    """One pydantic error as the rest of a `file:line: path:` line."""
    kind = err["type"]
    msg = err["msg"]
    value = err.get("input")
    if kind in _OPS:
        text, key = _OPS[kind]
        bound = err["ctx"][key]
        shown = f"{bound:,}" if isinstance(bound, int) and abs(bound) >= 10**6 else f"{bound:g}"
        msg = f"{text} {shown}, got {_short(value)}"
    elif kind == "finite_number":
        msg = f"must be a finite number, got {_short(value)}"
    elif kind == "string_pattern_mismatch" and "fixed:" in str(err["ctx"].get("pattern")):
        msg = f"must be ddp, tensor or fixed:<bytes> (a whole number, 1 or more), got {value!r}"
    elif kind == "extra_forbidden" and model is not None:
        name = str(err["loc"][-1])
        homes = _all_field_names(model)
        close = difflib.get_close_matches(name, sorted(homes), n=1)
        # the section it sits in: the last key on its path that names a field (not an
        # index, not a union's tag)
        keys = [str(k) for k in err["loc"][:-1] if str(k) in homes]
        here = keys[-1] if keys else ""
        if close and close[0] == name and here not in homes[name]:  # another section's key
            where = " or ".join(repr(h) if h else "the top" for h in homes[name])
            msg = f"unknown key {name!r} here; it belongs under {where}"
        elif close:
            home = homes[close[0]]
            under = f" (under {home[0]!r})" if here not in home and home[0] else ""
            msg = f"unknown key {name!r}; did you mean {close[0]!r}{under}?"
        else:
            msg = f"unknown key {name!r}"
    elif kind == "missing":
        msg = "required key is missing"
    elif kind == "value_error":
        msg = msg.removeprefix("Value error, ")
    elif kind == "literal_error" and isinstance(value, str):  # a name from a fixed list
        choices = re.findall(r"'([^']*)'", str(err.get("ctx", {}).get("expected", "")))
        close = difflib.get_close_matches(value, choices, n=1)
        msg = f"{msg}, got {_short(value)}" + (f"; did you mean {close[0]!r}?" if close else "")
    elif isinstance(value, (str, int, float, bool)) or value is None:
        msg = f"{msg}, got {_short(value)}"
    return msg


def _short(value: Any) -> str:
    """repr(value), cut to 60 characters (a 1,000-digit integer is not a message)."""
    big = isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**6
    text = f"{value:,}" if big else repr(value)
    return text if len(text) <= 60 else f"{text[:40]}…({len(text):,} characters)"


def _line_of(message: str) -> int:
    """The line number in `file:line: ...`, to list errors in file order."""
    parts = message.split(":")
    for p in parts[1:]:
        if p.isdigit():
            return int(p)
    return 0
