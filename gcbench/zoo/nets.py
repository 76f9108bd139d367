"""The zoo's architectures by name, built on the meta device (nothing is allocated).

`vision`, `language` and `ugatit` hold the modules; this file maps zoo names to builders.
Parameter totals are checked against the reference implementations in the tests
(`gcbench.zoo.catalog.MODELS[name].params` names each reference).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from gcbench.zoo import imagenet, language, vision


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
    "inception-v3": imagenet.inception_v3,
    "densenet121": imagenet.densenet121,
    "mobilenet-v2": imagenet.mobilenet_v2,
    "vit-b-16": imagenet.vit_b_16,
    "bert-base": lambda: language.bert_pretraining(large=False),
    "bert-large": lambda: language.bert_pretraining(large=True),
    "bert-base-squad": lambda: language.bert_squad(large=False),
    "bert-large-squad": lambda: language.bert_squad(large=True),
    "gpt2": language.gpt2,
    "gpt2-medium": lambda: language.gpt2("medium"),
    "gpt2-large": lambda: language.gpt2("large"),
    "gpt2-xl": lambda: language.gpt2("xl"),
    "llama-2-7b": language.llama2_7b,
    "lstm": language.lstm,
    "ugatit": _ugatit,
    "tiny-transformer": language.tiny_transformer,
    "tiny-cnn": vision.tiny_cnn,
    "tiny-mlp": vision.tiny_mlp,
}


class _SkipRandomInit(TorchFunctionMode):
    """Meta tensors hold no values, so random initialisation is skipped when building on
    meta. (torch's meta `normal_` is a Python reference whose first call imports
    torch._dynamo, about 2 s of a cold `gcbench model`.)"""

    SKIP = {
        torch.Tensor.normal_,
        torch.Tensor.uniform_,
        torch.Tensor.random_,
        nn.init.normal_,
        nn.init.uniform_,
        nn.init.trunc_normal_,
        nn.init.kaiming_uniform_,
        nn.init.kaiming_normal_,
        nn.init.xavier_uniform_,
        nn.init.xavier_normal_,
        nn.functional.normalize,  # spectral norm normalises its random u and v
    }

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.SKIP:  # return the tensor, unchanged (it holds no values anyway)
            return next(a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor))
        return func(*args, **kwargs)


def build(name: str, device: str | torch.device = "meta") -> nn.Module:
    """The named architecture, on the meta device unless another is asked for."""
    if str(device) == "meta":
        with torch.device(device), _SkipRandomInit():
            return BUILDERS[name]()
    with torch.device(device):
        return BUILDERS[name]()
