"""The zoo's architectures by name, built on the meta device (nothing is allocated).

`vision`, `language` and `ugatit` hold the modules; this file maps zoo names to builders.
Parameter totals are checked against the reference implementations in the tests
(`gcbench.zoo.catalog.MODELS[name].params` names each reference).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from gcbench.zoo import language, vision


def _ugatit() -> nn.Module:
    from gcbench.zoo.ugatit import ugatit

    return ugatit()


BUILDERS: dict[str, Callable[[], nn.Module]] = {
    "vgg16": lambda: vision.vgg("vgg16"),
    "vgg19": lambda: vision.vgg("vgg19"),
    "resnet50": lambda: vision.resnet(50),
    "resnet101": lambda: vision.resnet(101),
    "resnet152": lambda: vision.resnet(152),
    "resnet110": vision.resnet110,
    "resnet18-cifar": vision.resnet18_cifar,
    "bert-base": lambda: language.bert_pretraining(large=False),
    "bert-large": lambda: language.bert_pretraining(large=True),
    "bert-base-squad": lambda: language.bert_squad(large=False),
    "bert-large-squad": lambda: language.bert_squad(large=True),
    "gpt2": language.gpt2,
    "lstm": language.lstm,
    "ugatit": _ugatit,
    "tiny-transformer": language.tiny_transformer,
    "tiny-cnn": vision.tiny_cnn,
    "tiny-mlp": vision.tiny_mlp,
}


def build(name: str, device: str | torch.device = "meta") -> nn.Module:
    """The named architecture, on the meta device unless another is asked for."""
    with torch.device(device):
        return BUILDERS[name]()
