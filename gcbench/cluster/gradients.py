"""The gradients an emulated worker holds (issue #14): heavy-tailed synthetic values of the
model's exact tensor sizes, different per worker, step and tensor, and reproducible, so the
driver can recompute every worker's gradient for the exact fp32 sum without shipping them.

Student-t with ν = 3 (heavy tails, as measured gradients have: a few large values, most
near zero), drawn as z / sqrt(χ²₃ / 3) from one seeded generator per (seed, rank, step,
tensor), and scaled by 1/sqrt(numel) so tensors of every size carry comparable norms:
the law of `compress.law`, whose expected payload sizes the simulator plans with.
"""

from __future__ import annotations

import torch

from gcbench.compress.base import stable_seed
from gcbench.compress.law import NU, scale


def gradient(seed: int, rank: int, step: int, tensor: int, numel: int) -> torch.Tensor:
    """One tensor's gradient on one worker at one step (float32, `numel` values)."""
    g = torch.Generator().manual_seed(stable_seed("gradient", seed, rank, step, tensor))
    z = torch.randn(numel, generator=g)
    chi2 = torch.randn(NU, numel, generator=g).square_().sum(0)
    z /= (chi2 / NU).sqrt_()
    return z.mul_(scale(numel))


def bucket_gradient(
    seed: int, rank: int, step: int, tensors: list[int], numels: list[int]
) -> torch.Tensor:
    """A bucket's tensors' gradients, concatenated in the bucket's order."""
    return torch.cat([gradient(seed, rank, step, i, numels[i]) for i in tensors])
