"""The names the zoo offers and their pinned defaults, without importing torch.

Suite validation reads this table to check model names and fill default batch sizes;
`gcbench.zoo.nets` builds the architectures themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class ModelInfo:
    name: str
    batch_size: int  # per GPU
    seq_len: int | None  # sequence models only
    sample_unit: Literal["images", "tokens", "samples"]
    input_shape: tuple[int, ...]  # one sample, without the batch dimension
    description: str


MODELS: dict[str, ModelInfo] = {
    m.name: m
    for m in [
        # ByteComp Table 4: ResNet50 on ImageNet, batch 32 per GPU.
        ModelInfo("resnet50", 32, None, "images", (3, 224, 224), "ResNet-50 (ImageNet, 224x224)"),
        ModelInfo("tiny-mlp", 16, None, "samples", (64,), "3-layer MLP for tests (64-128-128-10)"),
        ModelInfo("tiny-cnn", 8, None, "images", (3, 32, 32), "2 conv + 1 linear layers for tests"),
    ]
}


def model_names() -> list[str]:
    return sorted(MODELS)
