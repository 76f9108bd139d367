"""Hypothesis strategies shared by the tests (STYLE §11): random options, plans and costs
for the timeline's property tests."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from hypothesis import strategies as st

from gcbench.comm import Link, nvlink_machine, pcie_machine
from gcbench.sim.iteration import Costs, Plan, zero_s
from gcbench.sim.options import Option, enumerate_options
from gcbench.zoo.profile import ModelProfile, TensorProfile


@cache
def all_options(additive: bool) -> tuple[Option, ...]:
    return tuple(enumerate_options(additive=additive))


@dataclass(frozen=True)
class Case:
    profile: ModelProfile
    costs: Costs
    plan: Plan


def _affine(a: float, b: float):
    return lambda elements: a + b * elements


@st.composite
def cases(draw, max_tensors: int = 8) -> Case:
    """A small synthetic model, a cluster (NVLink or two-switch PCIe machines), compression
    costs, and a plan: consecutive tensors fused into buckets, each with a random option
    of the whole space (additive or not)."""
    sizes = draw(st.lists(st.integers(1, 200_000), min_size=1, max_size=max_tensors))
    backward = draw(st.lists(st.floats(0, 5e-3), min_size=len(sizes), max_size=len(sizes)))
    tensors = tuple(
        TensorProfile(f"t{i}", (n,), n, f"l{i}", dt)
        for i, (n, dt) in enumerate(zip(sizes, backward, strict=True))
    )
    profile = ModelProfile("synthetic", 1, None, "samples", "v100", 1e-3, 1e-4, tensors)
    machines = draw(st.integers(1, 4))
    gpus = draw(st.sampled_from([1, 2, 4]))
    link = Link(draw(st.floats(1e9, 2e11)), draw(st.floats(0, 3e-5)), draw(st.floats(0.2, 1)))
    machine = (
        pcie_machine(gpus, 2 if gpus % 2 == 0 else 1, link.bandwidth_Bps / 1e9)
        if draw(st.booleans())
        else nvlink_machine(gpus, link.bandwidth_Bps / 1e9, link.latency_s, link.efficiency)
    )
    inter = Link(draw(st.floats(1e8, 5e10)), draw(st.floats(0, 1e-4)), draw(st.floats(0.2, 1)))
    additive = draw(st.booleans())
    ratio = draw(st.floats(0.001, 0.6))
    copies = draw(st.booleans())  # DDP's copy back out of each bucket
    costs = Costs(
        machines,
        gpus,
        machine,
        inter,
        nics=draw(st.integers(1, 2)),
        cpu_cores=draw(st.integers(1, 16)),
        cast_s=_affine(5e-6, 1e-11),
        bucket_copy_s=_affine(2e-6, 1e-11) if copies else zero_s,
        compress_s=_affine(draw(st.floats(0, 1e-4)), draw(st.floats(0, 1e-9))),
        decompress_s=_affine(draw(st.floats(0, 1e-4)), draw(st.floats(0, 1e-9))),
        cpu_compress_s=_affine(draw(st.floats(0, 1e-4)), draw(st.floats(0, 2e-8))),
        cpu_decompress_s=_affine(draw(st.floats(0, 1e-4)), draw(st.floats(0, 2e-8))),
        payload_bytes=lambda e, r=ratio: 16 + 4 * e * r,
        additive=additive,
        splittable=draw(st.booleans()),
    )
    cuts = (
        sorted(draw(st.sets(st.integers(1, len(sizes) - 1), max_size=len(sizes))))
        if len(sizes) > 1
        else []
    )
    edges = [0, *cuts, len(sizes)]
    buckets = [list(range(a, b)) for a, b in zip(edges, edges[1:], strict=False) if b > a]
    space = all_options(additive)
    options = [draw(st.sampled_from(space)) for _ in buckets]
    if draw(st.booleans()):  # fp16 on the options that carry uncompressed phases
        options = [
            Option(o.steps, fp16=True) if not all(p.compressed for p in o.phases) else o
            for o in options
        ]
    return Case(profile, costs, Plan(buckets, options))
