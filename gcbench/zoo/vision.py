"""Image models written with torch.nn, named as in their reference implementations.

- VGG-16/19 and ResNet-50/101/152 follow torchvision (`vgg16`, `resnet50`, ...: ResNet v1.5,
  stride on the 3x3 convolution), so their parameter names and totals match it exactly.
- ResNet-110 for CIFAR-10 follows He et al. 2016 §4.2 (the network 3LC trains, 3LC §4.3):
  3 stages of 18 basic blocks with 16, 32 and 64 filters and parameter-free shortcuts
  (option A: subsample and zero-pad the channels), as in akamaster/pytorch_resnet_cifar10.
- ResNet-18 for CIFAR-10 follows kuangliu/pytorch-cifar (3x3 stem, no max-pool, 1x1
  projection shortcuts), the model of ACP-SGD's convergence runs (ACP-SGD §V-A).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

# torchvision's VGG configurations: numbers are conv widths, "M" a 2x2 max-pool.
VGG_CONFIGS: dict[str, list[int | str]] = {
    "vgg16": [
        64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M",
    ],
    "vgg19": [
        64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M",
        512, 512, 512, 512, "M", 512, 512, 512, 512, "M",
    ],
}  # fmt: skip


class VGG(nn.Module):
    def __init__(self, config: list[int | str], num_classes: int = 1000):
        super().__init__()
        layers: list[nn.Module] = []
        channels = 3
        for v in config:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                assert isinstance(v, int)
                layers += [nn.Conv2d(channels, v, 3, padding=1), nn.ReLU(inplace=True)]
                channels = v
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((7, 7))
        self.classifier = nn.Sequential(
            nn.Linear(512 * 7 * 7, 4096),
            nn.ReLU(True),
            nn.Dropout(),
            nn.Linear(4096, 4096),
            nn.ReLU(True),
            nn.Dropout(),
            nn.Linear(4096, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(
        self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None
    ):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * self.expansion, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet(nn.Module):
    """torchvision's ImageNet ResNet with bottleneck blocks."""

    def __init__(self, layers: list[int], num_classes: int = 1000):
        super().__init__()
        self.inplanes = 64
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        self.layer1 = self._layer(64, layers[0])
        self.layer2 = self._layer(128, layers[1], stride=2)
        self.layer3 = self._layer(256, layers[2], stride=2)
        self.layer4 = self._layer(512, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512 * Bottleneck.expansion, num_classes)

    def _layer(self, planes: int, blocks: int, stride: int = 1) -> nn.Sequential:
        out = planes * Bottleneck.expansion
        downsample = None
        if stride != 1 or self.inplanes != out:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, out, 1, stride=stride, bias=False), nn.BatchNorm2d(out)
            )
        layers: list[nn.Module] = [Bottleneck(self.inplanes, planes, stride, downsample)]
        self.inplanes = out
        layers += [Bottleneck(out, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class BasicBlock(nn.Module):
    """Two 3x3 convolutions; the shortcut is a 1x1 projection (`shortcut`, kuangliu) or,
    with `pad_shortcut`, He et al.'s parameter-free option A (subsample, zero-pad)."""

    def __init__(self, inplanes: int, planes: int, stride: int = 1, pad_shortcut: bool = False):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.pad = 0
        self.shortcut = nn.Sequential()
        if stride != 1 or inplanes != planes:
            if pad_shortcut:
                self.pad = (planes - inplanes) // 2
            else:
                self.shortcut = nn.Sequential(
                    nn.Conv2d(inplanes, planes, 1, stride=stride, bias=False),
                    nn.BatchNorm2d(planes),
                )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.pad:
            short = F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, self.pad, self.pad))
        else:
            short = self.shortcut(x)
        return F.relu(out + short)


class CifarResNet(nn.Module):
    """CIFAR-10 ResNet: a 3x3 stem, stages of basic blocks, global pooling, 10 classes."""

    def __init__(
        self, widths: list[int], blocks: list[int], pad_shortcut: bool, num_classes: int = 10
    ):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        inplanes = widths[0]
        for i, (width, n) in enumerate(zip(widths, blocks, strict=True)):
            stride = 1 if i == 0 else 2
            layers = []
            for b in range(n):
                layers.append(BasicBlock(inplanes, width, stride if b == 0 else 1, pad_shortcut))
                inplanes = width
            self.add_module(f"layer{i + 1}", nn.Sequential(*layers))
        self.stages = len(widths)
        self.linear = nn.Linear(inplanes, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.bn1(self.conv1(x)))
        for i in range(self.stages):
            x = getattr(self, f"layer{i + 1}")(x)
        x = F.adaptive_avg_pool2d(x, 1)
        return self.linear(torch.flatten(x, 1))


def vgg(name: str) -> nn.Module:
    return VGG(VGG_CONFIGS[name])


def resnet(depth: int) -> nn.Module:
    blocks = {50: [3, 4, 6, 3], 101: [3, 4, 23, 3], 152: [3, 8, 36, 3]}[depth]
    return ResNet(blocks)


def resnet110() -> nn.Module:
    return CifarResNet([16, 32, 64], [18, 18, 18], pad_shortcut=True)


def resnet18_cifar() -> nn.Module:
    return CifarResNet([64, 128, 256, 512], [2, 2, 2, 2], pad_shortcut=False)


def tiny_cnn() -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 8 * 8, 10),
    )


def tiny_mlp() -> nn.Module:
    return nn.Sequential(
        nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 10)
    )
