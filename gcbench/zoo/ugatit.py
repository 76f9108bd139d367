"""U-GAT-IT: two attention generators and four spectral-norm discriminators, on torch.nn.

Kim, Kim, Kang and Lee, "U-GAT-IT: Unsupervised Generative Attentional Networks with Adaptive
Layer-Instance Normalization for Image-to-Image Translation" (ICLR 2020, arXiv:1907.10830).
The architecture follows the authors' PyTorch implementation, znxlwm/UGATIT-pytorch
(`networks.py`: ResnetGenerator, ResnetBlock, ResnetAdaILNBlock, adaILN, ILN, Discriminator)
with its default settings (`main.py`): img_size=256, ch=64, n_res=4, light=False, global
discriminators with n_layers=7 and local ones with n_layers=5 (`UGATIT.py` `build_model()`).

The parameters are those of the measured reference, `models.ugatit` in
`espresso-v100-profiles.json`: 148 tensors, 670,761,088 elements (2,558.75 MiB in fp32), with
the same names. Two deliberate differences from `networks.py`, neither changing any shape:

* Submodules are registered in the order their forward runs (the reference assigns
  `DownBlock`, `FC`, `UpBlock2` and the discriminators' `model` last), and in the wrapper the
  networks are registered in the order the training loop first calls them (genA2B, genB2A,
  disGA, disLA, disGB, disLB). `reversed(named_parameters())` is then exactly the reference's
  gradient-ready order.
* A spectral-normalised layer keeps its bias after `weight_orig` (torch's `spectral_norm`
  re-registers the weight last); see `_spectral_norm`.

Everything builds under `with torch.device("meta"):`.
"""

from __future__ import annotations

from typing import TypeVar

import torch
import torch.nn.functional as F
from torch import nn

UGATIT_PARAMETERS = 670_761_088

# Loss weights: the defaults of the reference `main.py`.
ADV_WEIGHT = 1.0
CYCLE_WEIGHT = 10.0
IDENTITY_WEIGHT = 10.0
CAM_WEIGHT = 1000.0

_M = TypeVar("_M", bound=nn.Module)


def _spectral_norm(module: _M) -> _M:
    """`torch.nn.utils.spectral_norm`, keeping the parameters in their original order.

    The hook-based `spectral_norm` (the one `networks.py` uses) works on the meta device,
    names the parameter `weight_orig` like the reference, keeps u and v as buffers and leaves
    the layer a leaf module (the parametrization-based variant renames the parameter and adds
    child modules). It re-registers the weight after the bias; moving the bias back behind it
    keeps registration order = (weight, bias), so the bias's gradient comes first in backward
    order, as in the reference profile. The power iteration runs in every training-mode
    forward, as in the reference: matrix-vector products, memory-bound work that torch's FLOP
    counter does not count.
    """
    module = nn.utils.spectral_norm(module)
    if "bias" in module._parameters:  # also when None (bias=False), which F.linear reads
        module._parameters["bias"] = module._parameters.pop("bias")
    return module


def _instance_layer_norm(x: torch.Tensor, rho: torch.Tensor, eps: float) -> torch.Tensor:
    """rho * InstanceNorm(x) + (1 - rho) * LayerNorm(x), without affine parameters.

    The statistics are those of the current reference `ILN`/`adaILN`: unbiased variance over
    (H, W) and over (C, H, W) (its first version took the variance of per-row variances).
    `var_mean`, `lerp` and `addcmul` keep the number of operations, and so the time of a
    meta-device trace, low; the result equals the reference's formula.
    """
    in_var, in_mean = torch.var_mean(x, dim=(2, 3), keepdim=True)
    ln_var, ln_mean = torch.var_mean(x, dim=(1, 2, 3), keepdim=True)
    out_in = (x - in_mean) * torch.rsqrt(in_var + eps)
    out_ln = (x - ln_mean) * torch.rsqrt(ln_var + eps)
    return torch.lerp(out_ln, out_in, rho)


class adaILN(nn.Module):  # the reference's name
    """Adaptive Layer-Instance Normalization: gamma and beta come from the generator's MLP."""

    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.rho = nn.Parameter(torch.full((1, num_features, 1, 1), 0.9))

    def forward(self, x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        out = _instance_layer_norm(x, self.rho, self.eps)
        return torch.addcmul(beta[:, :, None, None], out, gamma[:, :, None, None])


class ILN(nn.Module):
    """Layer-Instance Normalization with learned rho, gamma and beta (decoder upsampling)."""

    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.rho = nn.Parameter(torch.zeros(1, num_features, 1, 1))
        self.gamma = nn.Parameter(torch.ones(1, num_features, 1, 1))
        self.beta = nn.Parameter(torch.zeros(1, num_features, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(self.beta, _instance_layer_norm(x, self.rho, self.eps), self.gamma)


class ResnetBlock(nn.Module):
    """Encoder bottleneck block: two 3x3 convolutions with instance norm, plus the input."""

    def __init__(self, dim: int, use_bias: bool):
        super().__init__()
        self.conv_block = nn.Sequential(
            nn.ReflectionPad2d(1),
            nn.Conv2d(dim, dim, kernel_size=3, stride=1, padding=0, bias=use_bias),
            nn.InstanceNorm2d(dim),
            nn.ReLU(True),
            nn.ReflectionPad2d(1),
            nn.Conv2d(dim, dim, kernel_size=3, stride=1, padding=0, bias=use_bias),
            nn.InstanceNorm2d(dim),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv_block(x)


class ResnetAdaILNBlock(nn.Module):
    """Decoder bottleneck block: two 3x3 convolutions with AdaILN, plus the input."""

    def __init__(self, dim: int, use_bias: bool):
        super().__init__()
        self.pad1 = nn.ReflectionPad2d(1)
        self.conv1 = nn.Conv2d(dim, dim, kernel_size=3, stride=1, padding=0, bias=use_bias)
        self.norm1 = adaILN(dim)
        self.relu1 = nn.ReLU(True)
        self.pad2 = nn.ReflectionPad2d(1)
        self.conv2 = nn.Conv2d(dim, dim, kernel_size=3, stride=1, padding=0, bias=use_bias)
        self.norm2 = adaILN(dim)

    def forward(self, x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        out = self.relu1(self.norm1(self.conv1(self.pad1(x)), gamma, beta))
        out = self.norm2(self.conv2(self.pad2(out)), gamma, beta)
        return out + x


def _class_activation(
    x: torch.Tensor, gap_fc: nn.Module, gmp_fc: nn.Module
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """U-GAT-IT's CAM attention (shared by generators and discriminators): global average-
    and max-pooled logits, and the feature maps weighted by each FC layer's raw weight."""
    batch = x.shape[0]
    gap = F.adaptive_avg_pool2d(x, 1)
    gap_logit = gap_fc(gap.view(batch, -1))
    gap_weight = next(iter(gap_fc.parameters()))
    gap = x * gap_weight.unsqueeze(2).unsqueeze(3)

    gmp = F.adaptive_max_pool2d(x, 1)
    gmp_logit = gmp_fc(gmp.view(batch, -1))
    gmp_weight = next(iter(gmp_fc.parameters()))
    gmp = x * gmp_weight.unsqueeze(2).unsqueeze(3)
    return gap, gmp, torch.cat([gap_logit, gmp_logit], 1)


class ResnetGenerator(nn.Module):
    """Encoder, CAM attention, gamma/beta MLP and AdaILN decoder; returns (image, CAM logit,
    heatmap). The non-light MLP's first layer (256*64*64 -> 256) holds 268M parameters."""

    def __init__(
        self,
        input_nc: int = 3,
        output_nc: int = 3,
        ngf: int = 64,
        n_blocks: int = 4,
        img_size: int = 256,
        light: bool = False,
    ):
        super().__init__()
        self.n_blocks = n_blocks
        self.light = light
        n_downsampling = 2

        down: list[nn.Module] = [
            nn.ReflectionPad2d(3),
            nn.Conv2d(input_nc, ngf, kernel_size=7, stride=1, padding=0, bias=False),
            nn.InstanceNorm2d(ngf),
            nn.ReLU(True),
        ]
        for i in range(n_downsampling):
            mult = 2**i
            down += [
                nn.ReflectionPad2d(1),
                nn.Conv2d(
                    ngf * mult, ngf * mult * 2, kernel_size=3, stride=2, padding=0, bias=False
                ),
                nn.InstanceNorm2d(ngf * mult * 2),
                nn.ReLU(True),
            ]
        mult = 2**n_downsampling
        dim = ngf * mult
        down += [ResnetBlock(dim, use_bias=False) for _ in range(n_blocks)]
        self.DownBlock = nn.Sequential(*down)

        # Class activation map.
        self.gap_fc = nn.Linear(dim, 1, bias=False)
        self.gmp_fc = nn.Linear(dim, 1, bias=False)
        self.conv1x1 = nn.Conv2d(dim * 2, dim, kernel_size=1, stride=1, bias=True)
        self.relu = nn.ReLU(True)

        # Gamma, beta MLP (the reference's operator precedence, img_size // mult squared).
        fc_in = dim if light else img_size // mult * img_size // mult * dim
        self.FC = nn.Sequential(
            nn.Linear(fc_in, dim, bias=False),
            nn.ReLU(True),
            nn.Linear(dim, dim, bias=False),
            nn.ReLU(True),
        )
        self.gamma = nn.Linear(dim, dim, bias=False)
        self.beta = nn.Linear(dim, dim, bias=False)

        for i in range(n_blocks):
            setattr(self, f"UpBlock1_{i + 1}", ResnetAdaILNBlock(dim, use_bias=False))

        up: list[nn.Module] = []
        for i in range(n_downsampling):
            mult = 2 ** (n_downsampling - i)
            up += [
                nn.Upsample(scale_factor=2, mode="nearest"),
                nn.ReflectionPad2d(1),
                nn.Conv2d(
                    ngf * mult, ngf * mult // 2, kernel_size=3, stride=1, padding=0, bias=False
                ),
                ILN(ngf * mult // 2),
                nn.ReLU(True),
            ]
        up += [
            nn.ReflectionPad2d(3),
            nn.Conv2d(ngf, output_nc, kernel_size=7, stride=1, padding=0, bias=False),
            nn.Tanh(),
        ]
        self.UpBlock2 = nn.Sequential(*up)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.DownBlock(x)
        batch = x.shape[0]
        gap, gmp, cam_logit = _class_activation(x, self.gap_fc, self.gmp_fc)
        x = self.relu(self.conv1x1(torch.cat([gap, gmp], 1)))
        heatmap = torch.sum(x, dim=1, keepdim=True)

        if self.light:
            x_ = F.adaptive_avg_pool2d(x, 1)
            x_ = self.FC(x_.view(batch, -1))
        else:
            x_ = self.FC(x.view(batch, -1))
        gamma, beta = self.gamma(x_), self.beta(x_)

        for i in range(self.n_blocks):
            x = getattr(self, f"UpBlock1_{i + 1}")(x, gamma, beta)
        return self.UpBlock2(x), cam_logit, heatmap


class Discriminator(nn.Module):
    """PatchGAN-style discriminator with spectral norm and a CAM branch; returns (patch logits,
    CAM logit, heatmap). n_layers=7 gives the global discriminators, 5 the local ones."""

    def __init__(self, input_nc: int = 3, ndf: int = 64, n_layers: int = 5):
        super().__init__()
        model: list[nn.Module] = [
            nn.ReflectionPad2d(1),
            _spectral_norm(nn.Conv2d(input_nc, ndf, kernel_size=4, stride=2, padding=0, bias=True)),
            nn.LeakyReLU(0.2, True),
        ]
        for i in range(1, n_layers - 2):
            mult = 2 ** (i - 1)
            model += [
                nn.ReflectionPad2d(1),
                _spectral_norm(
                    nn.Conv2d(ndf * mult, ndf * mult * 2, kernel_size=4, stride=2, padding=0)
                ),
                nn.LeakyReLU(0.2, True),
            ]
        mult = 2 ** (n_layers - 2 - 1)
        model += [
            nn.ReflectionPad2d(1),
            _spectral_norm(
                nn.Conv2d(ndf * mult, ndf * mult * 2, kernel_size=4, stride=1, padding=0)
            ),
            nn.LeakyReLU(0.2, True),
        ]
        self.model = nn.Sequential(*model)

        # Class activation map.
        mult = 2 ** (n_layers - 2)
        dim = ndf * mult
        self.gap_fc = _spectral_norm(nn.Linear(dim, 1, bias=False))
        self.gmp_fc = _spectral_norm(nn.Linear(dim, 1, bias=False))
        self.conv1x1 = nn.Conv2d(dim * 2, dim, kernel_size=1, stride=1, bias=True)
        self.leaky_relu = nn.LeakyReLU(0.2, True)

        self.pad = nn.ReflectionPad2d(1)
        self.conv = _spectral_norm(
            nn.Conv2d(dim, 1, kernel_size=4, stride=1, padding=0, bias=False)
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.model(x)

        # As in the reference, the CAM weights are the parameters themselves (`weight_orig`,
        # not the spectral-normalised weight).
        gap, gmp, cam_logit = _class_activation(x, self.gap_fc, self.gmp_fc)
        x = self.leaky_relu(self.conv1x1(torch.cat([gap, gmp], 1)))
        heatmap = torch.sum(x, dim=1, keepdim=True)
        return self.conv(self.pad(x)), cam_logit, heatmap


def _mse(x: torch.Tensor, target: float) -> torch.Tensor:
    return F.mse_loss(x, torch.full_like(x, target))


def _bce(x: torch.Tensor, target: float) -> torch.Tensor:
    return F.binary_cross_entropy_with_logits(x, torch.full_like(x, target))


Outputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


class UGATIT(nn.Module):
    """The six networks of U-GAT-IT; `forward` is the forward work of one training iteration.

    `forward(x)` takes x of shape (B, 3, 256, 256) and uses it as both real_A and real_B (a
    reference `--batch_size B` iteration draws B images from each domain; only shapes matter
    here). It does the work of one iteration of the reference training loop, `UGATIT.py`
    `train()`, which makes 8 generator and 12 discriminator forward calls on B images each:

    * Update D: genA2B(real_A), genB2A(real_B); each discriminator on its domain's real
      images and on the fakes (disGA, disLA on real_A and fake_B2A; disGB, disLB on real_B and
      fake_A2B); least-squares (MSE) losses on the patch and CAM logits.
    * Update G: genA2B(real_A) and genB2A(real_B) again; the cycle reconstructions
      genB2A(fake_A2B) and genA2B(fake_B2A); the identity mappings genB2A(real_A) and
      genA2B(real_B); the four discriminators on the new fakes; adversarial (MSE), cycle and
      identity (L1) and CAM (BCE) losses with the reference's default weights.

    With `batched=True` (the default) the same work runs in 4 generator and 4 discriminator
    calls on concatenated batches: genA2B on [real_A, real_A, real_B] and genB2A on [real_B,
    real_B, real_A] (the "Update D" fake, the "Update G" fake, the identity mapping), then the
    two cycle calls on B images, then each discriminator on [real, "Update D" fake, "Update G"
    fake]. Every layer works per sample (instance and layer-instance norms, no batch norm),
    so a call on 3B images computes what three calls on B do, with the same FLOPs and
    activation sizes; what changes is fewer kernels (about 1,500 aten operations instead of
    3,400) and one spectral-norm power iteration per discriminator instead of three. A
    meta-device forward at batch 2 under torch's FLOP counter takes about 0.5 s instead of
    1.1 to 1.6 s. Batching across the two steps is exact for the generators, whose weights
    "Update D" leaves unchanged, and changes only the values, not the work, of the
    discriminators. `batched=False` replays the 20 calls one by one, in the reference's order.

    Either way the first uses of the parameters come in the order genA2B, genB2A, disGA,
    disLA, disGB, disLB, the reverse of the reference profile's gradient-ready order. The
    reference runs two backward passes (D loss, then G loss) with two optimizers; here the
    two losses are summed and returned as one scalar, so one forward and one backward pass do
    the iteration's work. As in the reference, the fakes are not detached in "Update D".
    """

    def __init__(
        self,
        img_size: int = 256,
        ch: int = 64,
        n_res: int = 4,
        light: bool = False,
        batched: bool = True,
    ) -> None:
        super().__init__()
        self.batched = batched
        # Registration order = the order of the first forward calls in `train()`, so that
        # reversed(named_parameters()) is the reference's gradient-ready order.
        self.genA2B = ResnetGenerator(3, 3, ngf=ch, n_blocks=n_res, img_size=img_size, light=light)
        self.genB2A = ResnetGenerator(3, 3, ngf=ch, n_blocks=n_res, img_size=img_size, light=light)
        self.disGA = Discriminator(3, ndf=ch, n_layers=7)
        self.disLA = Discriminator(3, ndf=ch, n_layers=5)
        self.disGB = Discriminator(3, ndf=ch, n_layers=7)
        self.disLB = Discriminator(3, ndf=ch, n_layers=5)

    def _discriminators(self) -> tuple[nn.Module, nn.Module, nn.Module, nn.Module]:
        """disGA, disLA (judging domain A), disGB, disLB (domain B), in `train()`'s order."""
        return self.disGA, self.disLA, self.disGB, self.disLB

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.batched:
            return self._iteration_batched(x, x)
        return self._update_d(x, x) + self._update_g(x, x)

    def _update_d(self, real_a: torch.Tensor, real_b: torch.Tensor) -> torch.Tensor:
        """The reference's "Update D" step, call by call."""
        fake_a2b, _, _ = self.genA2B(real_a)
        fake_b2a, _, _ = self.genB2A(real_b)
        reals = (real_a, real_a, real_b, real_b)
        fakes = (fake_b2a, fake_b2a, fake_a2b, fake_a2b)
        real_out: list[Outputs] = [d(r) for d, r in zip(self._discriminators(), reals, strict=True)]
        fake_out: list[Outputs] = [d(f) for d, f in zip(self._discriminators(), fakes, strict=True)]
        loss = real_a.new_zeros(())
        for (real_logit, real_cam, _), (fake_logit, fake_cam, _) in zip(
            real_out, fake_out, strict=True
        ):
            loss = loss + ADV_WEIGHT * (
                _mse(real_logit, 1.0)
                + _mse(fake_logit, 0.0)
                + _mse(real_cam, 1.0)
                + _mse(fake_cam, 0.0)
            )
        return loss

    def _update_g(self, real_a: torch.Tensor, real_b: torch.Tensor) -> torch.Tensor:
        """The reference's "Update G" step, call by call."""
        fake_a2b, fake_a2b_cam, _ = self.genA2B(real_a)
        fake_b2a, fake_b2a_cam, _ = self.genB2A(real_b)
        fake_a2b2a, _, _ = self.genB2A(fake_a2b)
        fake_b2a2b, _, _ = self.genA2B(fake_b2a)
        fake_a2a, fake_a2a_cam, _ = self.genB2A(real_a)
        fake_b2b, fake_b2b_cam, _ = self.genA2B(real_b)
        fakes = (fake_b2a, fake_b2a, fake_a2b, fake_a2b)
        loss = real_a.new_zeros(())
        for dis, fake in zip(self._discriminators(), fakes, strict=True):
            logit, cam, _ = dis(fake)
            loss = loss + ADV_WEIGHT * (_mse(logit, 1.0) + _mse(cam, 1.0))
        return loss + self._g_reconstruction_loss(
            real_a,
            real_b,
            (fake_a2b2a, fake_b2a2b, fake_a2a, fake_b2b),
            (fake_a2b_cam, fake_b2a_cam, fake_a2a_cam, fake_b2b_cam),
        )

    def _iteration_batched(self, real_a: torch.Tensor, real_b: torch.Tensor) -> torch.Tensor:
        """Both steps in 4 generator and 4 discriminator calls (see the class docstring)."""
        n = real_a.shape[0]
        # Generators on real images: ["Update D" fake, "Update G" fake, identity mapping].
        out_a2b, cam_a2b, _ = self.genA2B(torch.cat([real_a, real_a, real_b]))
        out_b2a, cam_b2a, _ = self.genB2A(torch.cat([real_b, real_b, real_a]))
        d_fake_a2b, fake_a2b, fake_b2b = out_a2b.split(n)
        d_fake_b2a, fake_b2a, fake_a2a = out_b2a.split(n)
        _, fake_a2b_cam, fake_b2b_cam = cam_a2b.split(n)
        _, fake_b2a_cam, fake_a2a_cam = cam_b2a.split(n)
        # Cycle reconstructions.
        fake_a2b2a, _, _ = self.genB2A(fake_a2b)
        fake_b2a2b, _, _ = self.genA2B(fake_b2a)

        reals = (real_a, real_a, real_b, real_b)
        d_fakes = (d_fake_b2a, d_fake_b2a, d_fake_a2b, d_fake_a2b)
        g_fakes = (fake_b2a, fake_b2a, fake_a2b, fake_a2b)
        d_loss = real_a.new_zeros(())
        g_loss = real_a.new_zeros(())
        for dis, real, d_fake, g_fake in zip(
            self._discriminators(), reals, d_fakes, g_fakes, strict=True
        ):
            logit, cam, _ = dis(torch.cat([real, d_fake, g_fake]))
            real_logit, d_fake_logit, g_fake_logit = logit.split(n)
            real_cam, d_fake_cam, g_fake_cam = cam.split(n)
            d_loss = d_loss + ADV_WEIGHT * (
                _mse(real_logit, 1.0)
                + _mse(d_fake_logit, 0.0)
                + _mse(real_cam, 1.0)
                + _mse(d_fake_cam, 0.0)
            )
            g_loss = g_loss + ADV_WEIGHT * (_mse(g_fake_logit, 1.0) + _mse(g_fake_cam, 1.0))
        return (
            d_loss
            + g_loss
            + self._g_reconstruction_loss(
                real_a,
                real_b,
                (fake_a2b2a, fake_b2a2b, fake_a2a, fake_b2b),
                (fake_a2b_cam, fake_b2a_cam, fake_a2a_cam, fake_b2b_cam),
            )
        )

    @staticmethod
    def _g_reconstruction_loss(
        real_a: torch.Tensor,
        real_b: torch.Tensor,
        images: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
        cams: tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor],
    ) -> torch.Tensor:
        """Cycle and identity L1 and CAM BCE terms of the generator loss.

        images: fake_A2B2A, fake_B2A2B, fake_A2A, fake_B2B; cams: the CAM logits of
        fake_A2B, fake_B2A (should read as translated) and fake_A2A, fake_B2B (should not).
        """
        a2b2a, b2a2b, a2a, b2b = images
        a2b_cam, b2a_cam, a2a_cam, b2b_cam = cams
        cycle = F.l1_loss(a2b2a, real_a) + F.l1_loss(b2a2b, real_b)
        identity = F.l1_loss(a2a, real_a) + F.l1_loss(b2b, real_b)
        cam = _bce(b2a_cam, 1.0) + _bce(a2a_cam, 0.0) + _bce(a2b_cam, 1.0) + _bce(b2b_cam, 0.0)
        return CYCLE_WEIGHT * cycle + IDENTITY_WEIGHT * identity + CAM_WEIGHT * cam


def ugatit(batched: bool = True) -> nn.Module:
    """U-GAT-IT with the reference defaults (256x256, ch=64, n_res=4, full version)."""
    return UGATIT(batched=batched)
