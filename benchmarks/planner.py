"""The ByteComp planner against what it could have chosen, in-process (no Ray).

    python benchmarks/planner.py [--suites] [--brute] [--offload] [--speed] [--space]
                                 [--scale [--reference TREE]] [--naive]
                                 [--instances 200] [--seed 0] [--espresso CHECKOUT]

Every part but --space, --scale and --naive by default.

1. **Suites** (issue #13, acceptance line 1): every cell of `suites/nvlink100.yaml` and
   `suites/pcie25.yaml` without CPU servers and with more than one machine (on one
   machine nothing crosses the network). Per (model, compressor, cluster): bytecomp-greedy's
   iteration ÷ the best uniform strategy inside its space (fp32, fp32-2level, fp16,
   allgather, allgather-2level), each timed by the same simulator; the share within
   1.02x, each loss with the strategy that beat it, and the other strategies (hipress,
   byteps-compress, powersgd, acpsgd, covap) ÷ the same best, beside it. Also the
   paper's one-tensor Algorithm 1 (`greedy(buckets=False)`) on the same cells.
2. **Brute force** (acceptance line 3): over {none, fp16, allgather, allgather-2level} per
   tensor, on tiny-cnn, tiny-mlp and lstm (8 x 8 V100 NVLink at 25 Gbps, dgc) and on
   `--instances` random instances of 1 to 8 tensors (random sizes, backward times,
   cluster, network and compressor, from `--seed`): the greedy restricted to the same
   set, its gap to the optimum (median, max), both with bucket candidates (gcbench's
   default) and without (the paper's one-tensor pass).

3. **Algorithm 2** (acceptance line 4): on `--instances` random instances of 1 to 12
   GPU-compressed tensors of a few sizes (random cluster, network, CPU pool), Lemma 1's
   order (farthest from the output first) and the authors' (nearest first) against the
   unrestricted search over all 2^|T| offload subsets: match rate and worst gap.

4. **Speed**: Algorithm 1 with candidates timed by the full simulator against the exact
   kernel (`gcbench.sim.kernel`), interleaved, the same plan checked, and Algorithm 2,
   on resnet101, bert-base, gpt2 and ugatit (8 x 8 V100, 100 Gbps, dgc, 48 cores).

5. **Option space** (`--space` only): Algorithm 1 over the 5 named options against all
   174 GPU paths of the decision tree, on lstm, vgg16, resnet50 and gpt2.

6. **At scale** (`--scale` only, issue #34): gpt2-xl and llama-2-7b on 1,024 GPUs, what
   `gcbench plan` runs, in fresh processes; with `--reference TREE` (a worktree of another
   commit) alternating with that tree's gcbench, the same plan checked.

7. **Against the naive planner** (`--naive` only): Algorithm 1 with the kernel against
   every candidate simulated whole, on `--instances` random instances (fusion, space,
   bucket candidates and passes drawn too).

What it compares: plans, all timed by gcbench's simulator; not against measurements.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from gcbench import strategies
from gcbench.backends.simulate import cell_profile, costs_for, simulate_cell
from gcbench.config import Cell, expand, load_suite
from gcbench.plan.brute import BRUTE_SPACE, brute_force
from gcbench.plan.greedy import greedy
from gcbench.zoo.profile import TensorProfile

ROOT = Path(__file__).resolve().parents[1]
UNIFORM = ("fp32", "fp32-2level", "fp16", "allgather", "allgather-2level")
BESIDE = ("hipress", "byteps-compress", "powersgd", "acpsgd", "covap")


def suites() -> None:
    for name in ("nvlink100", "pcie25"):
        t0 = time.perf_counter()
        times: dict[tuple, dict[str, float]] = defaultdict(dict)  # per grid compressor
        alone: dict[tuple, dict[str, float]] = defaultdict(dict)  # no or their own compressor
        one_tensor: dict[tuple, float] = {}
        for c in expand(load_suite(ROOT / "suites" / f"{name}.yaml")):
            cl = c.cluster
            if cl.machines == 1 or (cl.cpu_servers and c.strategy != "byteps-compress"):
                continue
            s = simulate_cell(c).metrics["iteration_s"]
            if strategies.get(c.strategy).compressor in ("none", "own"):
                alone[(c.model.name, cl.machines)][c.strategy] = s
                continue
            key = (c.model.name, c.compressor.label(), cl.machines)
            times[key][c.strategy] = s
            if c.strategy == "bytecomp-greedy":
                profile, costs = cell_profile(c), costs_for(c)
                one_tensor[key] = greedy(profile, costs).iteration_s
        ratios, paper, losses = [], [], []
        beside: dict[str, list[float]] = defaultdict(list)
        for key, t in sorted(times.items()):
            t = {**alone[(key[0], key[2])], **t}
            uniform = {s: t[s] for s in UNIFORM if s in t}
            best = min(uniform, key=lambda s: uniform[s])
            r = t["bytecomp-greedy"] / uniform[best]
            ratios.append(r)
            paper.append(one_tensor[key] / uniform[best])
            if r > 1.02:
                losses.append((r, key, best))
            for s in BESIDE:
                if s in t:
                    beside[s].append(t[s] / uniform[best])
        n = len(ratios)
        print(f"{name}: {n} (model, compressor, cluster) points, {time.perf_counter() - t0:.0f} s")
        within = sum(r <= 1.02 for r in ratios)
        print(
            f"  bytecomp-greedy / best uniform in its space: within 1.02x in {within}/{n} "
            f"({within / n:.1%}); median {statistics.median(ratios):.3f}, max {max(ratios):.3f}"
        )
        within_p = sum(r <= 1.02 for r in paper)
        print(
            f"  the paper's one-tensor pass: within 1.02x in {within_p}/{n} "
            f"({within_p / n:.1%}); median {statistics.median(paper):.3f}, max {max(paper):.3f}"
        )
        for r, key, best in sorted(losses, reverse=True):
            print(f"  loss {r:.3f}: {key[0]} {key[1]} {key[2]} machines (best: {best})")
        for s in BESIDE:
            v = beside[s]
            if v:
                print(
                    f"  {s:16s} / best uniform: median {statistics.median(v):.3f}, "
                    f"min {min(v):.3f}, max {max(v):.3f} ({len(v)} points)"
                )


def _random_instance(rng: random.Random, most: int = 8) -> tuple:
    n = rng.randint(1, most)
    c = Cell.model_validate(
        {
            "model": "tiny-mlp",
            "compressor": rng.choice(["dgc-1pct", "randomk-1pct", "efsignsgd"]),
            "network": {
                "intra": rng.choice(["nvlink", "pcie"]),
                "inter_gbps": rng.choice([10, 25, 100]),
            },
            "cluster": {"machines": rng.choice([2, 4, 8]), "gpus_per_machine": 8},
            "strategy": "bytecomp-greedy",
        }
    )
    base = cell_profile(c)
    tensors = [
        TensorProfile(
            f"t{i}", (k,), k, f"layer{i}", rng.uniform(0.1e-3, 20e-3)
        )
        for i in range(n)
        for k in [int(10 ** rng.uniform(3, 7.5))]
    ]
    return replace(base, name=f"random-{n}", tensors=tensors), costs_for(c)


def brute(instances: int, seed: int) -> None:
    space = BRUTE_SPACE[1:]
    cases = []
    for model in ("tiny-cnn", "tiny-mlp", "lstm"):
        c = Cell.model_validate(
            {
                "model": model,
                "compressor": "dgc-1pct",
                "network": {"inter_gbps": 25},
                "cluster": {"machines": 8, "gpus_per_machine": 8},
                "strategy": "bytecomp-greedy",
            }
        )
        cases.append((model, cell_profile(c), costs_for(c)))
    rng = random.Random(seed)
    cases += [("random", *_random_instance(rng)) for _ in range(instances)]
    t0 = time.perf_counter()
    gaps: dict[str, list[float]] = {"buckets": [], "one-tensor": []}
    sims = 0
    for name, profile, costs in cases:
        best = brute_force(profile, costs)
        sims += best.simulations
        for label, buckets in (("buckets", True), ("one-tensor", False)):
            g = greedy(profile, costs, space=space, buckets=buckets)
            gap = g.iteration_s / best.iteration_s - 1
            gaps[label].append(gap)
            if name != "random":
                print(f"  {name:9s} {len(profile.tensors):2d} tensors, greedy ({label}): "
                      f"gap {gap:.2%}")  # fmt: skip
    print(
        f"brute force over none/fp16/allgather/allgather-2level: {len(cases)} instances "
        f"(tiny-cnn, tiny-mlp, lstm, {instances} random of 1-8 tensors, seed {seed}), "
        f"{sims:,} plans in {time.perf_counter() - t0:.0f} s"
    )
    for label, v in gaps.items():
        print(
            f"  greedy ({label}) gap to the optimum: median {statistics.median(v):.2%}, "
            f"mean {statistics.mean(v):.2%}, max {max(v):.2%}; optimal in "
            f"{sum(g <= 1e-12 for g in v)}/{len(v)}"
        )


def _offload_instance(rng: random.Random) -> tuple:
    """1 to 12 tensors of a few sizes (so Lemma 1's groups form), each compressed on the
    GPU with allgather or allgather-2level, on a random cluster and CPU pool."""
    from gcbench.sim.options import PRESETS

    n = rng.randint(1, 12)
    c = Cell.model_validate(
        {
            "model": "tiny-mlp",
            "compressor": rng.choice(["dgc-1pct", "randomk-1pct", "efsignsgd"]),
            "network": {"inter_gbps": rng.choice([10, 25, 100])},
            "cluster": {
                "machines": rng.choice([2, 4, 8]),
                "gpus_per_machine": 8,
                "cpu_cores": rng.choice([2, 8, 16, 48]),
            },
            "strategy": "bytecomp",
        }
    )
    sizes = [int(10 ** rng.uniform(4, 7)) for _ in range(rng.randint(1, 3))]
    tensors = [
        TensorProfile(f"t{i}", (k,), k, f"layer{i}", rng.uniform(0.5e-3, 10e-3))
        for i in range(n)
        for k in [rng.choice(sizes)]
    ]
    options = [PRESETS[rng.choice(["allgather", "allgather-2level"])] for _ in range(n)]
    return replace(cell_profile(c), name=f"random-{n}", tensors=tensors), costs_for(c), options


def offload(instances: int, seed: int) -> None:
    from gcbench.plan.offload import algorithm2, unrestricted

    rng = random.Random(seed)
    t0 = time.perf_counter()
    gaps: dict[str, list[float]] = {"farthest": [], "nearest": []}
    useful = 0
    for _ in range(instances):
        profile, costs, options = _offload_instance(rng)
        ref = unrestricted(profile, costs, options)
        useful += ref.options != options
        for order in gaps:
            got = algorithm2(profile, costs, options, order=order)  # type: ignore[arg-type]
            gaps[order].append(got.iteration_s / ref.iteration_s - 1)
    print(
        f"Algorithm 2 against all 2^|T| offload subsets: {instances} random instances of "
        f"1-12 compressed tensors (seed {seed}; offloading helps in {useful}), "
        f"{time.perf_counter() - t0:.0f} s"
    )
    for order, v in gaps.items():
        match = sum(g <= 1e-12 for g in v)
        print(
            f"  {order:8s} first: matches the optimum in {match}/{len(v)} "
            f"({match / len(v):.1%}); worst gap {max(v):.2%}, mean {statistics.mean(v):.3%}"
        )


# Our zoo's model for each of the authors' profiled models.
ESPRESSO_MODELS = {
    "resnet101": "resnet101",
    "bert-base": "bert",
    "gpt2": "gpt2",
    "ugatit": "ugatit",
}


def _espresso_timer(folder: Path | None):
    """A function timing the authors' planner (Algorithm 1, Algorithm 2) for a model, in
    this process, from a checkout of their repository (never part of gcbench), or None."""
    if folder is None:
        return None
    import argparse as ap

    sched = folder / "byteps/torch/mergeComp/scheduler"
    if not (sched / "simulator_espresso.py").exists():
        raise SystemExit(f"{sched}: no simulator_espresso.py (give the Espresso checkout)")
    sys.path.insert(0, str(sched))
    import simulator_espresso as se  # the authors' planner

    def run(model: str) -> tuple[float, float, int, int]:
        """Their Algorithm 1 and 2 seconds, and how many strategies each evaluated (calls
        of their two whole-strategy timers)."""
        args = ap.Namespace(model=model, compressor="dgc", nodes=8, gpus_per_node=8,
                            comp_ratio=0.01, cpu=True, two_level=False, nvlink=True,
                            profile=False)  # fmt: skip
        sim = se.init_simulator(args)  # stateful: a fresh one each time
        calls = [0]
        for name in ("calculate_total_overhead_gpu", "calculate_total_overhead_cpu"):
            method = getattr(sim, name)

            def counted(*a: object, _m=method, **k: object) -> object:
                calls[0] += 1
                return _m(*a, **k)

            setattr(sim, name, counted)
        t0 = time.perf_counter()
        sim.get_fp32_tensor_comm_finish_time()
        sim.get_tensor_comm_finish_time(option=1)
        sim.search_tensor_compress_options_gpu(option=2)
        t1 = time.perf_counter()
        a1_calls, calls[0] = calls[0], 0
        sim.search_tensor_compress_options_cpu()
        return t1 - t0, time.perf_counter() - t1, a1_calls, calls[0]

    return run


def speed(
    repeats: int = 5, espresso: Path | None = None, profiles: Path | None = None
) -> None:
    """Planner time per model: Algorithm 1 scoring candidates with the full simulator
    (naive) and with the exact kernel, interleaved, median of `repeats`; Algorithm 2 after
    the kernel's plan; the same plan both ways (checked). With `espresso` (a checkout of
    the authors' repository), their Algorithms 1 and 2 timed in the same loop. With
    `profiles` (the authors' V100 profile collection), gcbench plans on those profiles
    instead of the zoo's."""
    from gcbench.plan.offload import algorithm2
    from gcbench.strategies.planners import BUCKETS, OFFLOAD_ORDER

    theirs = _espresso_timer(espresso)
    print(
        "planner speed: 8 x 8 V100 NVLink, 100 Gbps, dgc 1%, 48 CPU cores a machine "
        f"({'the profiles of ' + str(profiles) if profiles else 'zoo profiles'}), "
        f"median of {repeats}, naive and kernel interleaved"
        + (", with the authors' planner (their own profiles and constants)" if theirs else "")
    )
    from gcbench.config.models import Constraints
    from gcbench.plan.space import planner_space

    every = planner_space(Constraints(space="all"))  # dgc: not additive
    ends: list[tuple] = []
    head = f" {'theirs A1 ms':>12s} {'theirs A2 ms':>12s} {'A2/10':>6s}" if theirs else ""
    print(f"  {'model':16s} {'tensors':>7s} {'naive A1 ms':>11s} {'kernel A1 ms':>12s} "
          f"{'speed-up':>8s} {'A2 ms':>7s} {'candidates':>10s} {'all-space A1 ms':>15s} "
          f"{'candidates':>10s}{head}")  # fmt: skip
    for model in ("resnet101", "bert-base", "gpt2", "ugatit"):
        spec: object = model
        if profiles is not None:
            spec = {"name": model, "profile": f"{profiles}#{ESPRESSO_MODELS[model]}"}
        c = Cell.model_validate(
            {
                "model": spec,
                "compressor": "dgc-1pct",
                "network": {"intra": "nvlink", "intra_gbs": 150, "inter_gbps": 100},
                "cluster": {"machines": 8, "gpus_per_machine": 8, "cpu_cores": 48},
                "strategy": "bytecomp",
            }
        )
        profile, costs = cell_profile(c), costs_for(c)
        naive_t, fast_t, a2_t, all_t, their1, their2 = [], [], [], [], [], []
        a2w_t: list[float] = []
        their_n = (0, 0)
        for _ in range(repeats):
            if theirs:
                a1, a2, *their_n = theirs(ESPRESSO_MODELS[model])  # type: ignore[assignment]
                their1.append(a1)
                their2.append(a2)
            t0 = time.perf_counter()
            naive = greedy(profile, costs, buckets=BUCKETS, kernel=False)
            t1 = time.perf_counter()
            fast = greedy(profile, costs, buckets=BUCKETS)
            t2 = time.perf_counter()
            algorithm2(profile, costs, fast.options, order=OFFLOAD_ORDER)
            t3 = time.perf_counter()
            whole = greedy(profile, costs, space=every.options, start=every.start,
                           buckets=BUCKETS)  # fmt: skip
            t4 = time.perf_counter()
            # what `gcbench run` runs: Algorithm 2 on the whole-space plan
            offload = algorithm2(profile, costs, whole.options, order=OFFLOAD_ORDER)
            a2w_t.append(time.perf_counter() - t4)
            assert naive.options == fast.options
            naive_t.append(t1 - t0)
            fast_t.append(t2 - t1)
            a2_t.append(t3 - t2)
            all_t.append(t4 - t3)
        n, f, a, w = (statistics.median(v) * 1e3 for v in (naive_t, fast_t, a2_t, all_t))
        extra = ""
        if theirs:
            t1, t2 = (statistics.median(v) * 1e3 for v in (their1, their2))
            extra = f" {t1:12.1f} {t2:12.1f} {t2 / 10:6.1f}"
        gain = fast.iteration_s / whole.iteration_s - 1
        print(f"  {model:16s} {len(profile.tensors):7d} {n:11.1f} {f:12.1f} {n / f:7.1f}x "
              f"{a:7.1f} {fast.simulations:10,d} {w:15.1f} {whole.simulations:10,d}"
              f"{extra}   (whole space {gain:+.1%} faster iteration)")  # fmt: skip
        ends.append((model, w, statistics.median(a2w_t) * 1e3, whole.simulations,
                     offload.simulations, offload.capped,
                     (statistics.median(their1) + statistics.median(their2)) * 1e3
                     if theirs else None, their_n))  # fmt: skip
    _print_end_to_end(ends)


def _print_end_to_end(ends: list[tuple]) -> None:
    """What `gcbench run` runs (whole-space Algorithm 1, then Algorithm 2 on that plan)
    against the authors' Algorithms 1 and 2, and what each side evaluated: gcbench's
    candidates timed exactly (the rest ruled out by bounds) and Algorithm 2's plans
    (capped: coordinate search past MAX_PLANS, theirs exhaustive); theirs the calls of
    their two whole-strategy timers."""
    print("  end to end, what `gcbench run` runs: whole-space A1, then A2 on its plan")
    heads = ("A1 ms", "A2 ms", "ours ms", "timed", "A2 plans", "theirs ms", "their evals",
             "theirs/ours")  # fmt: skip
    widths = (8, 8, 8, 7, 9, 10, 12, 11)
    print(f"  {'model':16s} " + " ".join(f"{h:>{w}s}" for h, w in zip(heads, widths, strict=True)))
    for model, a1, a2, timed, plans, capped, theirs, their_n in ends:
        ours = a1 + a2
        cap = " (capped)" if capped else ""
        tail = (f" {theirs:10.1f} {sum(their_n):12,d} {theirs / ours:10.1f}x" if theirs
                else "")  # fmt: skip
        print(f"  {model:16s} {a1:8.1f} {a2:8.1f} {ours:8.1f} {timed:7,d} "
              f"{plans:9,d}{tail}{cap}")  # fmt: skip


def space() -> None:
    """What the whole option space gains: Algorithm 1 over the 5 named options against all
    174 GPU paths of ByteComp's decision tree (every compression on the GPU), both with
    bucket candidates and the exact kernel (candidates timed, and those whose lower bound
    ruled them out)."""
    from gcbench.sim.options import enumerate_options

    paths = sorted({o.path for o in enumerate_options(additive=False)}, key=lambda o: o.name)
    print(f"option space: 5 named options against all {len(paths)} GPU paths (dgc 1%)")
    for model, gbps, machines in (("lstm", 25, 8), ("vgg16", 25, 8), ("resnet50", 10, 4),
                                  ("gpt2", 25, 8)):  # fmt: skip
        c = Cell.model_validate(
            {
                "model": model,
                "compressor": "dgc-1pct",
                "network": {"inter_gbps": gbps},
                "cluster": {"machines": machines, "gpus_per_machine": 8},
                "strategy": "bytecomp",
            }
        )
        profile, costs = cell_profile(c), costs_for(c)
        t0 = time.perf_counter()
        named = greedy(profile, costs, buckets=True)
        t1 = time.perf_counter()
        every = greedy(profile, costs, space=paths, buckets=True)
        t2 = time.perf_counter()
        print(
            f"  {model:9s} {machines}x8 {gbps:3d} Gbps: 5 options {named.iteration_s * 1e3:7.1f} "
            f"ms ({t1 - t0:5.2f} s), {len(paths)} paths {every.iteration_s * 1e3:7.1f} ms "
            f"({t2 - t1:5.2f} s, {every.simulations:,} timed, {every.pruned:,} bounded): "
            f"{1 - every.iteration_s / named.iteration_s:+.1%}"
        )

SCALE_MODELS = ("gpt2-xl", "llama-2-7b")


def scale_once(model: str) -> None:
    """One process's plan of `model` on 128 x 8 V100 NVLink, 100 Gbps, dgc 1%: what
    `gcbench plan` runs (whole-space Algorithm 1, then Algorithm 2 on its plan), printed
    as one JSON line: each algorithm's seconds and a digest of the options chosen."""
    import hashlib
    import json

    from gcbench.config.models import Constraints
    from gcbench.plan.offload import algorithm2
    from gcbench.plan.space import planner_space
    from gcbench.strategies.planners import BUCKETS, OFFLOAD_ORDER, PASSES

    c = Cell.model_validate(
        {
            "model": model,
            "compressor": "dgc-1pct",
            "network": {"intra": "nvlink", "intra_gbs": 150, "inter_gbps": 100},
            "cluster": {"machines": 128, "gpus_per_machine": 8},
            "strategy": "bytecomp",
        }
    )
    profile, costs = cell_profile(c), costs_for(c)
    every = planner_space(Constraints(space="all"))
    t0 = time.perf_counter()
    g = greedy(profile, costs, space=every.options, start=every.start, passes=PASSES,
               buckets=BUCKETS)  # fmt: skip
    t1 = time.perf_counter()
    off = algorithm2(profile, costs, g.options, order=OFFLOAD_ORDER)
    t2 = time.perf_counter()
    digest = hashlib.sha1(repr([str(o) for o in off.options]).encode()).hexdigest()[:12]
    print(json.dumps({"a1": t1 - t0, "a2": t2 - t1, "timed": g.simulations,
                      "plan": digest, "iteration_s": off.iteration_s}))  # fmt: skip


def scale(reference: Path | None, rounds: int = 3) -> None:
    """Issue #34's planner at scale: `scale_once` per model in fresh processes, this tree
    and (`--reference TREE`: another checkout's `gcbench`, imported by this script)
    alternating, `rounds` each; the medians, their ratio, and whether both chose the same
    options."""
    import json
    import os
    import subprocess

    def once(tree: Path, model: str) -> dict:
        env = dict(os.environ, PYTHONPATH=str(tree))
        out = subprocess.run([sys.executable, __file__, "--scale-once", model], env=env,
                             check=True, capture_output=True, text=True).stdout  # fmt: skip
        return json.loads(out.strip().splitlines()[-1])

    trees = [("this tree", ROOT)] + ([("reference", reference)] if reference else [])
    print(f"planner at scale: 128 x 8 V100 NVLink, 100 Gbps, dgc 1%, whole space then "
          f"Algorithm 2 (what `gcbench plan` runs), fresh processes, median of {rounds}"
          + (", alternating with the reference" if reference else ""))  # fmt: skip
    for model in SCALE_MODELS:
        got: dict[str, list[dict]] = {name: [] for name, _ in trees}
        for _ in range(rounds):
            for name, tree in trees:
                got[name].append(once(tree, model))
        line = f"  {model:11s}"
        med = {}
        for name, _ in trees:
            runs = got[name]
            a1 = statistics.median(r["a1"] for r in runs)
            a2 = statistics.median(r["a2"] for r in runs)
            med[name] = a1 + a2
            line += (f" | {name}: A1 {a1:6.3f} s + A2 {a2:6.3f} s = {a1 + a2:6.3f} s "
                     f"({runs[0]['timed']:,} timed)")  # fmt: skip
        if reference:
            same = {r["plan"] for rs in got.values() for r in rs}
            line += (f" | reference / this {med['reference'] / med['this tree']:5.2f}x, "
                     f"{'the same plan' if len(same) == 1 else 'PLANS DIFFER'}")
        print(line)


def naive(instances: int, seed: int) -> None:
    """The kernel planner (bounds, longest paths, resumes) against the naive one (every
    candidate fused and simulated whole), on `instances` random instances of 1 to 20
    tensors (`_random_instance`), each with a random fusion (ddp, tensor, fixed at 4 MB
    or 200 kB), space (the whole one or the named options), bucket candidates or not, one
    or two passes, collectives as rings or as NCCL runs them: the plans, times and removed
    tensors must be the same."""
    from gcbench.config.models import Constraints
    from gcbench.plan.space import planner_space

    rng = random.Random(seed)
    same = 0
    for _ in range(instances):
        profile, costs = _random_instance(rng, most=20)
        costs = replace(costs, collectives=rng.choice(["ring", "nccl"]))
        fusion = rng.choice(["ddp", "tensor", "fixed:4000000", "fixed:200000"])
        space = planner_space(Constraints(space=rng.choice(["all", "named"])),
                              additive=costs.additive)  # fmt: skip
        kw = {"space": space.options, "start": space.start, "fusion": fusion,
              "buckets": rng.random() < 0.7, "passes": rng.choice([1, 2])}  # fmt: skip
        a = greedy(profile, costs, kernel=False, **kw)  # type: ignore[arg-type]
        b = greedy(profile, costs, **kw)  # type: ignore[arg-type]
        same += (a.options, a.iteration_s, a.removed) == (b.options, b.iteration_s, b.removed)
    print(f"kernel planner against the naive one, {instances} random instances (seed {seed}; "
          f"fusion, space, bucket candidates, passes and collectives drawn): the same plan, "
          f"time and removed tensors on {same} of {instances}")

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--suites", action="store_true")
    parser.add_argument("--brute", action="store_true")
    parser.add_argument("--offload", action="store_true")
    parser.add_argument("--speed", action="store_true")
    parser.add_argument("--space", action="store_true", help="not part of the default run")
    parser.add_argument(
        "--profiles",
        type=Path,
        default=None,
        help="plan on this Espresso-format profile collection in --speed (default: the zoo)",
    )
    parser.add_argument(
        "--espresso",
        type=Path,
        default=None,
        help="a checkout of github.com/zhuangwang93/Espresso: time the authors' planner "
        "beside gcbench's in --speed (never committed; without it those columns are left out)",
    )
    parser.add_argument("--scale", action="store_true", help="not part of the default run")
    parser.add_argument("--scale-once", metavar="MODEL", help=argparse.SUPPRESS)
    parser.add_argument(
        "--reference",
        type=Path,
        default=None,
        help="--scale: also time another checkout's gcbench (a git worktree), alternating",
    )
    parser.add_argument("--naive", action="store_true", help="not part of the default run")
    parser.add_argument("--instances", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.scale_once:
        scale_once(args.scale_once)
        return
    every = not (args.suites or args.brute or args.offload or args.speed or args.space
                 or args.scale or args.naive)  # fmt: skip
    if args.suites or every:
        suites()
    if args.brute or every:
        brute(args.instances, args.seed)
    if args.offload or every:
        offload(args.instances, args.seed)
    if args.speed or every:
        speed(espresso=args.espresso, profiles=args.profiles)
    if args.space:
        space()
    if args.scale:
        scale(args.reference)
    if args.naive:
        naive(args.instances, args.seed)


if __name__ == "__main__":
    sys.exit(main())
