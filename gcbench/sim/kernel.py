"""The planner's timeline kernel: one iteration's time, nothing else, fast.

Streams serve their jobs in the order they are added (`engine.Timeline`), so an
iteration is a recurrence over buckets: a job starts when its stream is free and its
predecessor has ended. `iteration_s` runs exactly the job sequence of
`iteration._simulate` (forward; per bucket its backward then the steps that need not wait
for backward; then, bucket by bucket, the steps that do; the update) with plain floats in
place of `Job`s, no trace, no metrics, and each bucket's lowered steps cached per what
they depend on: the bucket's tensors, its option and size, and the bucket index modulo
the CPU cores (`cpu:<b % cores>`) and the cluster size (rooted collectives' root is
`b % n` for a group of n, which divides the cluster size). The same floats in the same
order: the result equals `simulate(...).iteration_s` exactly (a test checks random
plans).
"""

from __future__ import annotations

from typing import Any

from gcbench.sim.iteration import Costs, Plan, _Ctx, _lower
from gcbench.zoo.profile import ModelProfile


class Kernel:
    """`iteration_s(plan)` for one profile and one set of costs, caching lowerings."""

    def __init__(self, profile: ModelProfile, costs: Costs):
        self.profile, self.costs = profile, costs
        self.numel = [t.numel for t in profile.tensors]
        self.backward = [t.backward_s for t in profile.tensors]
        self.ctx = _Ctx(costs, self.numel)
        self.cache: dict[tuple[Any, ...], tuple[list[tuple[str, float, bool]], int]] = {}
        self.evaluations = 0

    def _steps(
        self, bucket: list[int], option: Any, b: int, size: float | None
    ) -> tuple[list[tuple[str, float, bool]], int]:
        x = self.ctx
        key = (tuple(bucket), option, size, b % x.cores, b % x.N)
        hit = self.cache.get(key)
        if hit is None:
            steps, cut = _lower(option, bucket, b, x, size)
            hit = self.cache[key] = (
                [(s[0], s[2] if s[2] > 0 else 0.0, s[5]) for s in steps],
                cut,
            )
        return hit

    def iteration_s(self, plan: Plan) -> float:
        self.evaluations += 1
        free: dict[str, float] = {}
        end = 0.0

        def add(stream: str, dur: float, after: float) -> float:
            nonlocal end
            start = free.get(stream, 0.0)
            if after > start:
                start = after
            done = start + dur
            free[stream] = done
            if done > end:
                end = done
            return done

        profile = self.profile
        last = add("compute", profile.forward_s if profile.forward_s > 0 else 0.0, 0.0)
        single = self.ctx.N == 1
        rest: list[tuple[list[tuple[str, float, bool]], int, float]] = []
        done = 0
        sizes = plan.elements
        backward = self.backward
        for b, (bucket, opt) in enumerate(zip(plan.buckets, plan.options, strict=True)):
            for i in bucket:
                if i >= done:
                    d = backward[i]
                    last = add("compute", d if d > 0 else 0.0, last)
                    done = i + 1
            if single or opt is None:
                continue
            steps, cut = self._steps(bucket, opt, b, None if sizes is None else sizes[b])
            t = last
            for stream, dur, _ in steps[:cut]:
                t = add(stream, dur, t)
            rest.append((steps, cut, t))
        backward_end = last
        tails = last
        for steps, cut, t in rest:
            for stream, dur, after_backward in steps[cut:]:
                dep = t if not after_backward or t >= backward_end else backward_end
                t = add(stream, dur, dep)
            if t > tails:
                tails = t
        update = profile.update_s if profile.update_s > 0 else 0.0
        add("compute", update, tails)
        return end
