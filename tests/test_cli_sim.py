"""The one-cell commands (`simulate`, `bench compressors`, `profile`, `model`, `models`),
--json output, progress lines and Chrome traces of large clusters (issue 11, part C).

Each test names the defect it guards; every one failed at 81933ad."""

from __future__ import annotations

import io
import json
import math
import os
import re
import signal
import time
import tracemalloc
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from gcbench.cli import app
from gcbench.cli.progress import progress_bar

runner = CliRunner()
SIM = ["simulate", "--model", "resnet50", "--inter-gbps", "25"]


def invoke(*args: str, **kw):
    return runner.invoke(app, list(args), catch_exceptions=False, **kw)


def one_error(r, flag: str) -> str:
    """The single `error: FLAG: ...` line of a rejected command (exit 2, no traceback,
    nothing on stdout)."""
    assert r.exit_code == 2, r.output
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag}:"), r.stderr
    assert r.stdout == "" and "Traceback" not in r.output
    return lines[0]


def strict(text: str):
    """json.loads that rejects Infinity, -Infinity and NaN (not JSON, RFC 8259)."""

    def refuse(name: str):
        raise ValueError(f"not JSON: {name}")

    return json.loads(text, parse_constant=refuse)


# --- an explicit --compressor the cell does not use -------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--strategy", "fp32", "--compressor", "topk-1pct"],
            "fp32 uses no compressor; got topk-1pct",
        ),
        (["--compressor", "dgc-1pct"], "fp32 uses no compressor; got dgc-1pct"),  # fp32: default
        (["--strategy", "fp16", "--compressor", "fp16"], "fp16 uses no compressor; got fp16"),
        (["--strategy", "ps", "--cpu-servers", "1", "--compressor", "onebit"], "ps uses no"),
        (
            ["--strategy", "powersgd", "--compressor", "topk-1pct"],
            "powersgd uses its own compressor (powersgd); got topk-1pct",
        ),
        (["--strategy", "covap", "--compressor", "acpsgd-r4"], "covap uses its own compressor"),
        (
            ["--option", "flat:ar", "--compressor", "topk-1pct"],
            "option 'flat:ar' compresses nothing; got topk-1pct",
        ),
    ],
)  # fmt: skip
def test_simulate_rejects_a_compressor_the_cell_does_not_use(args, message):
    """81933ad: `--strategy fp32 --compressor topk-1pct` printed `topk-1pct` over fp32's
    uncompressed numbers (exit 0)."""
    line = one_error(invoke(*SIM, *args), "--compressor")
    assert message in line


@pytest.mark.parametrize(
    "args, label",
    [
        (["--strategy", "fp32"], "fp32 · none"),
        (["--strategy", "fp32", "--compressor", "none"], "fp32 · none"),
        (["--strategy", "powersgd"], "powersgd · powersgd-r4"),
        (["--strategy", "powersgd", "--compressor", "powersgd:rank=8"], "powersgd:rank=8"),
        (["--strategy", "hitopkcomm", "--compressor", "fp16"], "allgather-2level · fp16"),
        (["--option", "gc flat:ag* gd", "--compressor", "topk-1pct"], "topk-1pct"),
    ],
)
def test_simulate_takes_a_compressor_the_cell_uses(args, label):
    r = invoke(*SIM, *args)
    assert r.exit_code == 0, r.output
    assert label in r.stdout.splitlines()[0]


# --- errors name the flag ---------------------------------------------------------------


@pytest.mark.parametrize(
    "flag, value, extra",
    [
        ("--batch", "0", []),
        ("--batch", "-3", []),
        ("--seq-len", "0", ["--model", "bert-base"]),
        ("--machines", "0", []),
        ("--gpus-per-machine", "0", []),
        ("--cpu-cores", "0", []),
        ("--nics-per-machine", "0", []),
        ("--intra-gbs", "-1", []),
        ("--intra", "infiniband", []),
        ("--inter-efficiency", "2", []),
        ("--fusion", "fixed:0", []),
        ("--device", "tpu", []),
        ("--compressor", "topk:ratio=3", ["--strategy", "allgather"]),
        ("--strategy", "nope", []),
        ("--model", "gpt3", []),
    ],
)
def test_simulate_errors_name_the_flag(flag, value, extra):
    """81933ad: `simulate --batch 0` said `error: --model: ...`."""
    args = [*SIM, *extra]
    if flag == "--model":
        args[args.index("--model") + 1] = value
    else:
        args += [flag, value]
    one_error(invoke(*args), flag)


# --- strict JSON ------------------------------------------------------------------------


def test_dumps_writes_non_finite_numbers_as_strings():
    from gcbench.cli.common import dumps

    data = {"a": math.inf, "b": [-math.inf, math.nan, 1.5], "c": (2, None, "x"), "d": {"e": 0.0}}
    assert strict(dumps(data)) == {
        "a": "inf",
        "b": ["-inf", "nan", 1.5],
        "c": [2, None, "x"],
        "d": {"e": 0.0},
    }


def test_simulate_json_is_strict(monkeypatch, tmp_path):
    """81933ad: `--json` printed `Infinity` for a non-finite number (here a metric), which
    no strict JSON parser reads."""
    import gcbench.backends.simulate as costs

    real = costs.simulate_cell

    def infinite(*a, **kw):
        r = real(*a, **kw)
        r.metrics.update(throughput=math.inf, scaling_factor=math.nan)
        return r

    monkeypatch.setattr(costs, "simulate_cell", infinite)
    trace = tmp_path / "t.json"
    r = invoke(*SIM, "--machines", "2", "--json", "--trace", str(trace))
    assert r.exit_code == 0, r.output
    out = strict(r.stdout)
    assert out["metrics"]["throughput"] == "inf" and out["metrics"]["scaling_factor"] == "nan"
    assert strict(trace.read_text())["traceEvents"]


@pytest.mark.parametrize(
    "flag", ["--inter-gbps", "--intra-gbs", "--server-gbps", "--summation-gbs"]
)
def test_infinite_flags_are_rejected_or_strict_json(flag):
    """81933ad: `--inter-gbps inf --json` printed `"inter_gbps": Infinity`. A non-finite
    value is either rejected in one line or written as a string."""
    args = [a for a in SIM if a not in ("--inter-gbps", "25")] + (
        ["--inter-gbps", "25"] if flag != "--inter-gbps" else []
    )
    r = invoke(*args, flag, "inf", "--json")
    if r.exit_code == 2:
        one_error(r, flag)
    else:
        assert r.exit_code == 0, r.output
        strict(r.stdout)


@pytest.mark.parametrize(
    "args",
    [
        ["models", "--json"],
        ["model", "tiny-mlp", "--json"],
        ["compressors", "--json"],
        ["options", "--compressor", "fp16", "--json"],
        ["bench", "compressors", "--device", "v100", "--json"],
        [*SIM, "--strategy", "byteps", "--cpu-servers", "1", "--json"],
    ],
)
def test_every_json_output_is_strict(args):
    r = invoke(*args)
    assert r.exit_code == 0, r.output
    strict(r.stdout)


def test_json_help_says_how_non_finite_numbers_are_written():
    for args in (["models"], ["model"], ["simulate"], ["compressors"], ["options"]):
        # (the help's columns may break a line at the hyphen)
        text = " ".join(invoke(*args, "--help").stdout.split()).replace("non- finite", "non-finite")
        assert 'non-finite numbers as "inf", "-inf", "nan"' in text, args


# --- progress lines ---------------------------------------------------------------------

LAST = "resnet50 · allgather-2level · topk-1pct · 8x8 nvlink · 100 Gbps · v100 · cell 3f2a9c"


def progress(done: int, total: int = 30, failed: int = 0) -> SimpleNamespace:
    return SimpleNamespace(
        total=total, done=done, failed=failed, skipped=0, elapsed_s=2.0 * done,
        eta_s=2.0 * (total - done), last=LAST,
    )  # fmt: skip


@pytest.fixture
def console(monkeypatch):
    """Make the bars' `Console(stderr=True)` a console of a given width on a buffer."""
    import rich.console

    made: dict = {}
    real = rich.console.Console

    def use(width: int, terminal: bool = False) -> io.StringIO:
        buf = io.StringIO()

        def factory(*a, **kw):
            return real(file=buf, width=width, force_terminal=terminal, color_system=None)

        monkeypatch.setattr(rich.console, "Console", factory)
        made["buf"] = buf
        return buf

    return use


def visible(text: str) -> list[str]:
    """The lines a terminal shows once carriage returns and erase-line codes are played."""
    text = re.sub(r"\x1b\[\?25[hl]", "", text)
    lines = []
    for raw in text.split("\n"):
        frames = [re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", f) for f in raw.split("\r")]
        shown = [f for f in frames if f]
        if shown:
            lines.append(shown[-1])
    return lines


@pytest.mark.parametrize("width", [80, 60, 40, 30])
def test_progress_keeps_done_and_total_in_a_narrow_console(console, width):
    """81933ad: at 80 columns the bar printed `0 failed · … resnet50 · …`: the suite
    name, the bar and done/total were squeezed out by the last cell's label."""
    buf = console(width)
    with progress_bar("smoke") as update:
        for i in range(1, 31):
            update(progress(i, failed=i // 10))
    lines = visible(buf.getvalue())
    assert len(lines) == 1, lines  # the final state, printed once, on one line
    assert "30/30" in lines[0] and lines[0].startswith("smoke")
    assert len(lines[0]) <= width
    if width >= 60:
        assert "3 failed" in lines[0] and "1:00 eta 0:00" in lines[0]


def test_progress_off_a_terminal_ends_its_line(console):
    """Off a terminal (a log, CI) the last progress line had no newline: the run's
    summary went on the same line (issue #35)."""
    buf = console(80)
    with progress_bar("smoke") as update:
        update(progress(30))
    assert buf.getvalue().endswith("\n") and "30/30" in buf.getvalue()


def test_progress_at_columns_80(monkeypatch, capsys):
    """`COLUMNS=80 gcbench run ...`: the default console reads COLUMNS."""
    monkeypatch.setenv("COLUMNS", "80")
    with progress_bar("smoke") as update:
        for i in range(1, 31):
            update(progress(i))
    lines = visible(capsys.readouterr().err)
    assert len(lines) == 1 and "30/30" in lines[0] and len(lines[0]) <= 80


def test_iteration_bar_keeps_done_and_total_in_a_narrow_console(console):
    from gcbench.cli.progress import iteration_bar

    buf = console(40)
    with iteration_bar("bench compressors with a long name") as tick:
        for i in range(1, 163):
            tick(i, 162)
    (line,) = visible(buf.getvalue())
    assert "162/162" in line and len(line) <= 40


def test_progress_prints_its_last_state_once_around_ctrl_c(console):
    """81933ad: Ctrl-C during `gcbench run` printed the bar, the `interrupted` message,
    then the bar again: the bar stayed live while `run` printed its message. Now the
    SIGINT stops the bar first: its last state shows once, and the message comes last."""
    buf = console(80, terminal=True)
    # Python's own handler, as in a terminal: a shell's background job (CI's, sometimes)
    # starts with SIGINT ignored
    saved = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with progress_bar("smoke") as update:
            update(progress(7))
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(5)  # the handler raises KeyboardInterrupt here
                raise AssertionError("no KeyboardInterrupt")
            except KeyboardInterrupt:
                buf.write("\ninterrupted: finished cells are saved\n")  # as `run` does
        restored = signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, saved)
    lines = visible(buf.getvalue())
    assert lines[-1] == "interrupted: finished cells are saved", lines
    assert [line for line in lines if "7/30" in line] == [lines[0]]
    assert restored is signal.default_int_handler  # the bar put back what it found


# --- bench compressors and profile: one line, exit 2 ------------------------------------


def _no_cuda() -> bool:
    import torch

    return not torch.cuda.is_available()


@pytest.mark.skipif(not _no_cuda(), reason="a CUDA device is visible")
@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:1"])
def test_cuda_on_a_cpu_build_is_one_line(device, tmp_path):
    """81933ad: `bench compressors --torch-device cuda` on a CPU build ended in torch's
    `AssertionError: Torch not compiled with CUDA enabled` traceback."""
    out = tmp_path / "t.json"
    r = invoke("bench", "compressors", "--torch-device", device, "--only", "topk",
               "--sizes", "10", "--out", str(out))  # fmt: skip
    assert "no CUDA device" in one_error(r, "--torch-device")
    assert not out.exists()
    r = invoke("profile", "tiny-mlp", "--torch-device", device, "--out", str(out))
    assert "no CUDA device" in one_error(r, "--torch-device")
    assert not out.exists()


def test_cuda_index_beyond_the_visible_devices(monkeypatch):
    import torch

    from gcbench.cli.common import check_torch_device
    from gcbench.errors import ConfigError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert check_torch_device("cuda") == "cuda" and check_torch_device("cuda:1") == "cuda:1"
    with pytest.raises(ConfigError, match=r"no cuda:2; torch sees 2 CUDA device\(s\)"):
        check_torch_device("cuda:2")


@pytest.mark.parametrize("device", ["mps", "cuda:x", "cpu:0", "cuda:", "gpu"])
def test_malformed_torch_device_is_one_line(device, tmp_path):
    r = invoke("bench", "compressors", "--torch-device", device, "--only", "topk", "--sizes", "10")
    one_error(r, "--torch-device")
    r = invoke("profile", "tiny-mlp", "--torch-device", device, "--out", str(tmp_path / "p.json"))
    one_error(r, "--torch-device")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("sizes", ["40", "27", "9", "0", "-3", "10,1000", "134217728", "x", ","])
def test_sizes_out_of_range_are_one_line(sizes, tmp_path):
    """81933ad: `--sizes 40` (help: 10..26) tried to allocate 2^40 floats (4 TiB) and
    ended in a traceback."""
    out = tmp_path / "t.json"
    r = invoke("bench", "compressors", "--sizes", sizes, "--only", "topk", "--out", str(out))
    one_error(r, "--sizes")
    assert not out.exists()


def test_sizes_in_range(tmp_path):
    from gcbench.cli.choices import _sizes

    assert _sizes("10,26") == (1024, 2**26)
    assert _sizes("1024, 67108864") == (1024, 2**26)
    out = tmp_path / "t.json"
    r = invoke("bench", "compressors", "--sizes", "10,1024", "--only", "topk", "--out", str(out))
    assert r.exit_code == 0, r.output
    assert strict(out.read_text())


# --- huge clusters ----------------------------------------------------------------------


@pytest.mark.slow  # every strategy twice under tracemalloc
def test_simulation_cost_does_not_grow_with_identical_machines():
    """The simulator times worker 0 alone: the same spans, and about the same memory, for
    2 machines and 100,000 (checked for every strategy)."""
    from gcbench import strategies
    from gcbench.backends.simulate import simulate_cell
    from gcbench.config.models import Cell

    compressor = {"none": "none", "own": "none", "additive": "fp16", "any": "topk-1pct"}
    planners = {"bytecomp", "bytecomp-greedy", "brute-force", "upper-bound"}
    for name, info in strategies.registry().items():
        servers = 1 if info.servers == "required" else 0
        # a planner's plan follows the cluster size (so may its spans); brute force
        # takes models of at most 10 tensors
        model = "tiny-mlp" if name in planners else "resnet50"
        results, peaks = [], []
        for machines in (2, 100_000):
            cell = Cell.model_validate(
                {
                    "model": model,
                    "compressor": compressor[info.compressor],
                    "strategy": name,
                    "network": {"inter_gbps": 25},
                    "cluster": {"machines": machines, "cpu_servers": servers},
                }
            )
            tracemalloc.start()
            results.append(simulate_cell(cell))
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
        small, large = results
        if name not in planners:  # hipress: fewer roots to rotate
            assert len(large.spans) <= len(small.spans), name
        assert peaks[1] < 2 * peaks[0] + 2**20, name


def test_traces_of_large_clusters_are_bounded():
    """81933ad: a trace copied worker 0's spans to one GPU of every machine above 64 GPUs:
    100,000 machines gave ~12 M events (8 GB, 90 s)."""
    from gcbench.sim.chrome import SHOWN_GPUS, SHOWN_MACHINES, chrome_trace, symmetric_spans
    from gcbench.sim.trace import Span

    spans = [Span(0, "compute", "backward", "backward", 0.0, 1.0)]
    for machines, gpus in ((1000, 8), (100_000, 8), (10**9, 16), (100, 1)):
        copied = symmetric_spans(spans, machines, gpus)
        assert len(copied) <= SHOWN_MACHINES * SHOWN_GPUS
        data = chrome_trace(copied, gpus, machines=machines)
        other = data["otherData"]
        assert other["representative"] and other["machines"] == machines
        assert other["shown_machines"][0] == 0 and other["shown_machines"][-1] == machines - 1
        assert len(other["shown_machines"]) <= SHOWN_MACHINES
        labels = [e for e in data["traceEvents"] if e["name"] == "process_labels"]
        assert len(labels) == len(other["shown_machines"])
        assert f"of {machines:,} identical machines" in labels[0]["args"]["labels"]
    # small clusters: every GPU, and no labels
    data = chrome_trace(symmetric_spans(spans, 8, 8), 8, machines=8)
    assert len([e for e in data["traceEvents"] if e["ph"] == "X"]) == 64
    assert not data["otherData"]["representative"]
    assert not [e for e in data["traceEvents"] if e["name"] == "process_labels"]


def test_simulate_trace_of_100000_machines(tmp_path):
    """`simulate --machines 100000 --trace` writes representative machines in seconds and
    says so on the command line and in the trace."""
    out = tmp_path / "t.json"
    start = time.perf_counter()
    r = invoke(*SIM, "--machines", "100000", "--trace", str(out))
    assert r.exit_code == 0, r.output
    assert time.perf_counter() - start < 30
    assert "representative workers only: machines 0, 1, 99998, 99999 of 100,000" in r.stdout
    data = strict(out.read_text())
    assert out.stat().st_size < 5 * 2**20
    pids = {e["pid"] for e in data["traceEvents"]}
    assert pids == {0, 1, 99998, 99999}
    assert data["otherData"]["shown_gpus"] == list(range(8))


# --- help -------------------------------------------------------------------------------


def test_simulate_help_lists_every_strategy():
    """81933ad: `simulate --help` listed fp32, fp16, allgather and allgather-2level, not
    fp32-2level."""
    from gcbench import strategies
    from gcbench.cli import STRATEGY_HELP

    text = invoke("simulate", "--help").stdout
    block = text[text.index("--strategy") : text.index("--option")]
    block = re.sub(r"-\s+", "-", " ".join(block.split()))  # undo wrapping at hyphens
    listed = set(re.findall(r"[a-z][a-z0-9-]*[a-z0-9]", block.removeprefix("--strategy")))
    listed -= {"str", "default", "alias", "the", "planner"}
    assert listed == set(strategies.names()) | set(strategies.aliases())
    named = set(re.findall(r"[a-z][a-z0-9-]*[a-z0-9]", STRATEGY_HELP)) - {
        "default",
        "alias",
        "the",
        "planner",
    }
    assert named == set(strategies.names()) | set(strategies.aliases())


# --- output paths: one line before any work ---------------------------------------------


def _bad_targets(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    return [
        (tmp_path, "it is a folder"),
        (fifo, "not a regular file"),  # as /dev/null: 81933ad replaced it with the trace
        (blocker / "t.json", "is a file, not a folder"),
        (tmp_path / ("x" * 250 + ".json"), "the file name is too long"),
        (tmp_path / ("d" * 300) / "t.json", "a name in it is too long"),
        (__import__("pathlib").Path("/proc/gcbench-test/t.json"), "not writable"),
    ]


@pytest.mark.parametrize(
    "command, flag",
    [
        ([*SIM, "--trace"], "--trace"),
        (["bench", "compressors", "--device", "v100", "--out"], "--out"),
        (["bench", "compressors", "--only", "topk", "--sizes", "10", "--out"], "--out"),
        (["profile", "tiny-mlp", "--out"], "--out"),
    ],
)
def test_unwritable_output_paths_are_one_line(command, flag, tmp_path):
    """81933ad: `--trace /tmp` (a folder), a path under a file, a name too long or an
    unwritable folder ended in an OSError traceback after the work; a FIFO (or /dev/null)
    was replaced by a regular file."""
    for target, why in _bad_targets(tmp_path):
        before = sorted(p.name for p in tmp_path.iterdir())
        line = one_error(invoke(*command, str(target)), flag)
        assert why in line, line
        assert sorted(p.name for p in tmp_path.iterdir()) == before
        assert (tmp_path / "fifo").is_fifo()


@pytest.mark.slow
def test_simulate_and_plan_say_how_much_faster_than_no_compression():
    """Issue #36: the prediction beside the baselines without compression (fp32,
    fp32-2level; PS and BytePS where the cell has servers), each simulated alone, and the
    speed-up over the best of them."""
    args = ["--machines", "4", "--model", "resnet50", "--inter-gbps", "25"]
    r = invoke("simulate", *args, "--strategy", "allgather-2level", "--compressor", "dgc-1pct")
    assert r.exit_code == 0, r.output
    times = {}
    for s in ("fp32", "fp32-2level", "allgather-2level"):
        extra = ["--compressor", "dgc-1pct"] if s == "allgather-2level" else []
        out = json.loads(invoke("simulate", *args, "--strategy", s, *extra, "--json").stdout)
        times[s] = out["metrics"]["iteration_s"]
    line = next(x for x in r.stdout.splitlines() if x.startswith("without compression:"))
    assert f"fp32 {times['fp32'] * 1e3:.2f} ms" in line
    assert f"fp32-2level {times['fp32-2level'] * 1e3:.2f} ms" in line
    best = min(times["fp32"], times["fp32-2level"])
    ratio = best / times["allgather-2level"]  # 25 Gbps: about even (DDP's copies both ways)
    said = f"{ratio:.2f}× faster" if ratio >= 1 else f"{1 / ratio:.2f}× slower"
    assert f"{said} than the best" in line
    r = invoke("simulate", *args, "--strategy", "byteps", "--cpu-servers", "2")
    assert "BytePS with 2 servers" in r.stdout and "PS with 2 servers" in r.stdout
    r = invoke("plan", *args, "--compressor", "dgc-1pct", "--constraints", "space=named")
    assert r.exit_code == 0 and "without compression: fp32 " in r.stdout
