"""Suite loading: every mistake reported with file:line, unsafe YAML refused fast."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import jsonschema
import pytest
import yaml

from gcbench.compress.specs import PRESETS, TopkSpec
from gcbench.config import load_suite, suite_schema
from gcbench.errors import ConfigError

from conftest import ROOT, write

MISTAKES = """\
name: bad
mode: simulate
colour: blue
grid:
  model: [resnet50]
  compressor:
    - none
    - zipit
  network:
    - {inter_gbps: -10}
  cluster:
    - machines: 0
  strategy: fp32
repetitions: two
"""


def test_every_mistake_on_its_own_line(tmp_path):
    path = write(tmp_path, "bad.yaml", MISTAKES)
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    lines = info.value.messages
    assert lines == sorted(lines, key=lambda m: int(m.split(":")[1]))
    expect = {
        3: "colour: unknown key 'colour'",
        8: "grid.compressor.1: unknown compressor 'zipit'",
        10: "grid.network.0.inter_gbps: must be > 0, got -10",
        12: "grid.cluster.0.machines: must be ≥ 1, got 0",
        14: "repetitions: Input should be a valid integer",
    }
    assert len(lines) == len(expect)
    for line, (number, text) in zip(lines, expect.items(), strict=True):
        assert line.startswith(f"{path}:{number}: {text}"), line


def test_nested_compressor_parameter_line(tmp_path):
    text = MISTAKES.replace("    - zipit\n", "    - {kind: topk, ratio: 3}\n")
    with pytest.raises(ConfigError) as info:
        load_suite(write(tmp_path, "bad.yaml", text))
    assert (
        f"{tmp_path / 'bad.yaml'}:8: grid.compressor.1.ratio: must be ≤ 1, got 3"
        in info.value.messages
    )


def test_missing_key_points_at_its_mapping(tmp_path):
    text = "name: x\ngrid:\n  model: resnet50\n  cluster: {machines: 1}\n"
    with pytest.raises(ConfigError) as info:
        load_suite(write(tmp_path, "m.yaml", text))
    assert info.value.messages == [
        f"{tmp_path / 'm.yaml'}:2: grid.network: required key is missing"
    ]


BAD_FILES = {
    "broken.yaml": ("name: x\ngrid: {model: [resnet50\n", ":3: invalid YAML"),
    "empty.yaml": ("", ":1: the file is empty"),
    "latin1.yaml": ("name: caf\xe9\n".encode("latin-1"), ":1: not UTF-8 text"),
    "pyobj.yaml": (
        "name: !!python/object/apply:os.system ['echo hi']\n",
        ":1: unsupported YAML tag",
    ),
    "custom.yaml": ("name: !mine x\n", ":1: unsupported YAML tag"),
    "bomb.yaml": (
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)},"
            f" *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)},"
            f" *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n"
            for i in range(8)
        ),
        "alias bomb",
    ),
    "list.yaml": ("- 1\n- 2\n", ":1: expected a mapping"),
}


@pytest.mark.parametrize("name", sorted(BAD_FILES))
def test_bad_files_give_one_clear_line_fast(tmp_path, name):
    content, expected = BAD_FILES[name]
    path = write(tmp_path, name, content)
    start = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    elapsed = time.perf_counter() - start
    assert len(info.value.messages) == 1
    assert info.value.messages[0].startswith(str(path))
    assert expected in info.value.messages[0]
    assert "\n" not in info.value.messages[0]
    # A safety bound, not a benchmark: an alias bomb must not be expanded.
    assert elapsed < 1.0


def test_recursive_alias_is_rejected(tmp_path):
    with pytest.raises(ConfigError, match="recursive YAML alias"):
        load_suite(write(tmp_path, "r.yaml", "a: &a [1, *a]\n"))


def test_emulate_mode_is_reserved(tmp_path):
    text = (ROOT / "suites/smoke.yaml").read_text().replace("mode: simulate", "mode: emulate")
    with pytest.raises(ConfigError, match="mode 'emulate' .* reserved for a later release"):
        load_suite(write(tmp_path, "e.yaml", text))


def test_compressor_forms_are_equivalent(tmp_path):
    base = (
        "name: c\ngrid:\n  model: tiny-mlp\n  network: {inter_gbps: 10}\n  cluster: {machines: 2}\n"
    )
    forms = ["topk-1pct", "'topk:ratio=0.01'", "{kind: topk, ratio: 0.01}", "{kind: topk}"]
    specs = {
        load_suite(write(tmp_path, f"c{i}.yaml", base + f"  compressor: {f}\n")).grid.compressor[0]
        for i, f in enumerate(forms)
    }
    assert specs == {TopkSpec(kind="topk", ratio=0.01)}
    assert PRESETS["topk-1pct"].label() == "topk-1pct"
    assert TopkSpec(kind="topk", ratio=0.05).label() == "topk:ratio=0.05"


def _modules_after(code: str, *names: str) -> list[str]:
    """Run `code` in a fresh interpreter (other tests' imports cannot leak in) and say,
    for each of `names`, whether it ended up in sys.modules."""
    probe = f"import sys; {code}; print(*[n in sys.modules for n in {list(names)!r}])"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return out.stdout.split()


def test_loading_imports_neither_torch_nor_ray():
    code = (
        "from gcbench.config import load_suite, expand; "
        f"expand(load_suite({str(ROOT / 'suites/smoke.yaml')!r}))"
    )
    assert _modules_after(code, "torch", "ray") == ["False", "False"]


def test_compressor_specs_import_no_torch():
    assert _modules_after("import gcbench.compress.specs", "torch") == ["False"]


def test_zoo_profile_files_do_not_import_the_results_store():
    # profile_io writes files with gcbench.files.atomic_write, not through gcbench.results
    code = "import gcbench.zoo.profile_io, gcbench.zoo.catalog, gcbench.zoo.devices"
    assert _modules_after(code, "gcbench.results", "torch", "ray") == ["False", "False", "False"]


def test_committed_schema_is_current_and_accepts_shipped_suites():
    committed = json.loads((ROOT / "schema/suite.schema.json").read_text())
    assert committed == suite_schema(), "run: gcbench schema > schema/suite.schema.json"
    validator = jsonschema.Draft202012Validator(committed)
    for path in sorted((ROOT / "suites").glob("*.yaml")):
        first = path.read_text().splitlines()[0]
        assert first == "# yaml-language-server: $schema=../schema/suite.schema.json", path
        validator.validate(yaml.safe_load(path.read_text()))
        load_suite(path)
