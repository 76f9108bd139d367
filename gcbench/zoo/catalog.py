"""The names the zoo offers and their pinned defaults, without importing torch.

Suite validation reads this table to check model names and fill default batch sizes;
`gcbench.zoo.nets` builds the architectures themselves.

Default batch sizes and sequence lengths follow the paper that evaluates each model:
ByteComp Table 4 (vgg16, resnet101, ugatit, bert-base-squad, gpt2, lstm), ACP-SGD §III
(resnet152, bert-base, bert-large: batch 32, 32, 8 at sequence length 64), 3LC §4.3
(resnet110: 32 images per worker), ACP-SGD §V-A (resnet18 on CIFAR-10: 128 images).
resnet50 keeps batch 32, the batch of the V100 profile the ByteComp authors published.
The ImageNet models added for issue #12 (inception-v3, densenet121, mobilenet-v2,
vit-b-16) take 32 images like resnet50; the larger GPT-2s shrink the batch so that fp32
Adam training fits a 32 GB V100 (medium 4, large 2, xl 1 sequence of 1,024 tokens:
1.56 B parameters x 16 bytes of weights, gradients and Adam state is 25 GB before
activations); llama-2-7b runs 1 sequence of 4,096 tokens (its context length).

ByteComp Table 4's "80 tokens" (GPT2, LSTM) and "1024 tokens" (BERT-base) are not batch
sizes: they are constants in the throughput lines of the authors' scripts (ByteComp's code in
bytedance/byteps and zhuangwang93/Espresso). The scripts themselves run GPT2 at 4 sequences
of 1,024 tokens (`--per_gpu_train_batch_size 4`, block size = the tokenizer's 1,024) and the
LSTM at 80 sequences of bptt 70 (`lstm/main.py` defaults). Their SQuAD BERT runs at
`--max_seq_length 384`; the script says batch 8, but the V100 backward times the authors
published fit 4 sequences (8 x 384 tokens would need 17 TFLOP/s of fp32 from a 15.7 TFLOP/s
V100), so we pin 4 x 384. The FLOP arithmetic per reading is in docs/architecture.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Unit = Literal["images", "tokens", "samples"]


@dataclass(frozen=True)
class ModelInfo:
    name: str
    batch_size: int  # per GPU: images, or sequences for sequence models
    seq_len: int | None  # sequence models only
    sample_unit: Unit
    input_shape: tuple[int, ...]  # one image (C, H, W) or () for token models
    vocab: int | None  # token models: the size of the input vocabulary
    description: str
    params: int  # parameter total of the reference implementation
    reference: str  # where `params` comes from


def _image(
    name: str, batch: int, size: int, desc: str, params: int, ref: str, classes_in: int = 3
) -> ModelInfo:
    return ModelInfo(name, batch, None, "images", (classes_in, size, size), None, desc, params, ref)


def _tokens(
    name: str, batch: int, seq: int, vocab: int, desc: str, params: int, ref: str
) -> ModelInfo:
    return ModelInfo(name, batch, seq, "tokens", (), vocab, desc, params, ref)


MODELS: dict[str, ModelInfo] = {
    m.name: m
    for m in [
        _image("vgg16", 32, 224, "VGG-16 (ImageNet)", 138_357_544, "torchvision vgg16"),
        _image("vgg19", 32, 224, "VGG-19 (ImageNet)", 143_667_240, "torchvision vgg19"),
        _image("resnet50", 32, 224, "ResNet-50 v1.5 (ImageNet)", 25_557_032, "torchvision"),
        _image("resnet101", 32, 224, "ResNet-101 v1.5 (ImageNet)", 44_549_160, "torchvision"),
        _image("resnet152", 32, 224, "ResNet-152 v1.5 (ImageNet)", 60_192_808, "torchvision"),
        _image(
            "resnet110",
            32,
            32,
            "ResNet-110 for CIFAR-10 (He et al. 2016 §4.2, identity shortcuts)",
            1_727_962,
            "He et al. 2016 Table 6 (1.7M), option A as in akamaster/pytorch_resnet_cifar10; "
            "1,730,714 with projection shortcuts",
        ),
        _image(
            "resnet18-cifar",
            128,
            32,
            "ResNet-18 for CIFAR-10 (3x3 stem, no max-pool)",
            11_173_962,
            "kuangliu/pytorch-cifar ResNet18",
        ),
        _image(
            "inception-v3",
            32,
            299,
            "Inception v3 (ImageNet, 299x299, auxiliary classifier included)",
            27_161_264,
            "torchvision inception_v3(aux_logits=True); Szegedy et al. 2016",
        ),
        _image(
            "densenet121",
            32,
            224,
            "DenseNet-121 (ImageNet, growth 32)",
            7_978_856,
            "torchvision densenet121; Huang et al. 2017 Table 1",
        ),
        _image(
            "mobilenet-v2",
            32,
            224,
            "MobileNet v2 (ImageNet, width 1.0)",
            3_504_872,
            "torchvision mobilenet_v2; Sandler et al. 2018 Table 4: 3.4M",
        ),
        _image(
            "vit-b-16",
            32,
            224,
            "ViT-B/16 (ImageNet, 224x224, 16x16 patches)",
            86_567_656,
            "torchvision vit_b_16; Dosovitskiy et al. 2021 Table 1: 86M",
        ),
        _tokens(
            "bert-base",
            32,
            64,
            30522,
            "BERT-base with pre-training heads (MLM + NSP, tied decoder)",
            110_106_428,
            "HF BertForPreTraining bert-base-uncased; ACP-SGD Table I: 110.1M",
        ),
        _tokens(
            "bert-large",
            8,
            64,
            30522,
            "BERT-large with pre-training heads (MLM + NSP, tied decoder)",
            336_226_108,
            "HF BertForPreTraining bert-large-uncased; ACP-SGD Table I: 336.2M",
        ),
        _tokens(
            "bert-base-squad",
            4,
            384,
            30528,
            "BERT-base SQuAD fine-tuning (no pooler, vocabulary padded to 30,528)",
            108_897_794,
            "HF BertForQuestionAnswering at vocab 30,528; ByteComp/Espresso profile (199 tensors)",
        ),
        _tokens(
            "bert-large-squad",
            4,
            384,
            30528,
            "BERT-large SQuAD fine-tuning (no pooler, vocabulary padded to 30,528)",
            334_100_482,
            "HF BertForQuestionAnswering at vocab 30,528; ByteComp/Espresso profile (391 tensors)",
        ),
        _tokens(
            "gpt2",
            4,
            1024,
            50257,
            "GPT-2 small (124M, tied embeddings)",
            124_439_808,
            "HF GPT2LMHeadModel gpt2; ByteComp Table 4: 475 MB",
        ),
        _tokens(
            "gpt2-medium",
            4,
            1024,
            50257,
            "GPT-2 medium (355M, tied embeddings)",
            354_823_168,
            "HF GPT2LMHeadModel gpt2-medium num_parameters(); Radford et al. 2019 Table 2: 345M",
        ),
        _tokens(
            "gpt2-large",
            2,
            1024,
            50257,
            "GPT-2 large (774M, tied embeddings)",
            774_030_080,
            "HF GPT2LMHeadModel gpt2-large num_parameters(); Radford et al. 2019 Table 2: 762M",
        ),
        _tokens(
            "gpt2-xl",
            1,
            1024,
            50257,
            "GPT-2 XL (1.5B, tied embeddings)",
            1_557_611_200,
            "HF GPT2LMHeadModel gpt2-xl num_parameters(); Radford et al. 2019 Table 2: 1542M",
        ),
        _tokens(
            "llama-2-7b",
            1,
            4096,
            32000,
            "Llama 2 7B (32 decoder layers, SwiGLU, RMSNorm, untied head)",
            6_738_415_616,
            "HF LlamaForCausalLM meta-llama/Llama-2-7b-hf num_parameters() (291 tensors); "
            "Touvron et al. 2023 Table 1: 7B",
        ),
        _tokens(
            "lstm",
            80,
            70,
            33278,
            "2-layer word-level LSTM LM on WikiText-2 (1500 hidden, tied decoder)",
            85_974_278,
            "PyTorch word_language_model, --emsize 1500 --nhid 1500 --tied; ByteComp: 328 MB",
        ),
        _image(
            "ugatit",
            2,
            256,
            "U-GAT-IT (2 generators, 4 discriminators, 256x256, full model)",
            670_761_088,
            "znxlwm/UGATIT-pytorch networks.py; ByteComp Table 4: 2,559 MB",
        ),
        _tokens(
            "tiny-transformer",
            4,
            32,
            1000,
            "2-layer transformer LM for tests (d=64, tied embeddings)",
            168_192,
            "this file (tests only)",
        ),
        _image("tiny-cnn", 8, 32, "2 conv + 1 linear layers for tests", 25_578, "tests only"),
        ModelInfo(
            "tiny-mlp",
            16,
            None,
            "samples",
            (64,),
            None,
            "3-layer MLP for tests (64-128-128-10)",
            26_122,
            "tests only",
        ),
    ]
}


# The ByteComp/Espresso V100 profile collection's model names -> zoo models (its `ncf` has
# no zoo counterpart). Used to import that collection and to calibrate the V100 entry.
ESPRESSO_MODELS: dict[str, str] = {
    "vgg16": "vgg16",
    "resnet50": "resnet50",
    "resnet101": "resnet101",
    "bert": "bert-base-squad",
    "bert_large": "bert-large-squad",
    "gpt2": "gpt2",
    "lstm": "lstm",
    "ugatit": "ugatit",
}


def model_names() -> list[str]:
    return sorted(MODELS)
