"""Language models written with torch.nn, named as in Hugging Face transformers.

- BERT (Devlin et al. 2019) as HF `BertForPreTraining` (masked-LM and next-sentence heads,
  decoder tied to the word embeddings) and `BertForQuestionAnswering` (SQuAD; no pooler,
  as in NVIDIA DeepLearningExamples' `run_squad.py`, which ByteComp ran with the vocabulary
  padded to a multiple of 8: 30,528). Attention is computed as HF's eager implementation
  does (two batched matmuls around a softmax).
- GPT-2 small as HF `GPT2LMHeadModel` (Conv1D layers, LM head tied to `wte`).
- GPT-2 medium, large and XL: the same module at HF's `gpt2-medium` (1,024 wide, 24
  layers, 16 heads), `gpt2-large` (1,280, 36, 20) and `gpt2-xl` (1,600, 48, 25).
- Llama 2 7B as HF `LlamaForCausalLM` (Touvron et al. 2023, Table 1 and §2.2: RMSNorm
  before each sublayer, SwiGLU MLP of width 11,008, rotary position embeddings, which have
  no parameters; untied output head): 32 decoder layers, 291 tensors.
- The LSTM language model of ByteComp's WikiText-2 runs (AWD-LSTM's `RNNModel` as in the
  authors' `lstm/model.py`): an embedding, one `nn.LSTM` per layer in `rnns`, and a decoder
  tied to the embedding, so only `decoder.bias` is its own parameter.

Every model takes token ids of shape (batch, seq_len).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class BertConfig:
    vocab: int = 30522
    hidden: int = 768
    layers: int = 12
    heads: int = 12
    intermediate: int = 3072
    max_positions: int = 512
    type_vocab: int = 2


BERT_BASE = BertConfig()
BERT_LARGE = BertConfig(hidden=1024, layers=24, heads=16, intermediate=4096)


class BertEmbeddings(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.word_embeddings = nn.Embedding(c.vocab, c.hidden)
        self.position_embeddings = nn.Embedding(c.max_positions, c.hidden)
        self.token_type_embeddings = nn.Embedding(c.type_vocab, c.hidden)
        self.LayerNorm = nn.LayerNorm(c.hidden, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        types = torch.zeros_like(ids)
        x = self.word_embeddings(ids) + self.position_embeddings(positions)
        x = x + self.token_type_embeddings(types)
        return self.dropout(self.LayerNorm(x))


class BertSelfAttention(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.heads = c.heads
        self.query = nn.Linear(c.hidden, c.hidden)
        self.key = nn.Linear(c.hidden, c.hidden)
        self.value = nn.Linear(c.hidden, c.hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, self.heads, h // self.heads).transpose(1, 2)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(h // self.heads)
        probs = self.dropout(F.softmax(scores, dim=-1))
        return torch.matmul(probs, v).transpose(1, 2).reshape(b, s, h)


class BertSelfOutput(nn.Module):
    def __init__(self, c: BertConfig, width: int):
        super().__init__()
        self.dense = nn.Linear(width, c.hidden)
        self.LayerNorm = nn.LayerNorm(c.hidden, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dropout(self.dense(x)) + residual)


class BertAttention(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.self = BertSelfAttention(c)
        self.output = BertSelfOutput(c, c.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(x), x)


class BertIntermediate(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.dense = nn.Linear(c.hidden, c.intermediate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.dense(x))


class BertLayer(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.attention = BertAttention(c)
        self.intermediate = BertIntermediate(c)
        self.output = BertSelfOutput(c, c.intermediate)  # HF's BertOutput has the same shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attention(x)
        return self.output(self.intermediate(x), x)


class BertEncoder(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(c) for _ in range(c.layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            x = layer(x)
        return x


class BertPooler(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.dense = nn.Linear(c.hidden, c.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.dense(x[:, 0]))


class BertModel(nn.Module):
    def __init__(self, c: BertConfig, pooler: bool):
        super().__init__()
        self.embeddings = BertEmbeddings(c)
        self.encoder = BertEncoder(c)
        self.pooler = BertPooler(c) if pooler else None

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        x = self.encoder(self.embeddings(ids))
        return x, (self.pooler(x) if self.pooler is not None else None)


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.dense = nn.Linear(c.hidden, c.hidden)
        self.LayerNorm = nn.LayerNorm(c.hidden, eps=1e-12)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(F.gelu(self.dense(x)))


class BertLMPredictionHead(nn.Module):
    def __init__(self, c: BertConfig, embedding: nn.Embedding):
        super().__init__()
        self.transform = BertPredictionHeadTransform(c)
        self.decoder = nn.Linear(c.hidden, c.vocab, bias=False)
        self.decoder.weight = embedding.weight  # tied (HF `tie_weights`)
        self.bias = nn.Parameter(torch.zeros(c.vocab))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.transform(x)) + self.bias


class BertPreTrainingHeads(nn.Module):
    def __init__(self, c: BertConfig, embedding: nn.Embedding):
        super().__init__()
        self.predictions = BertLMPredictionHead(c, embedding)
        self.seq_relationship = nn.Linear(c.hidden, 2)

    def forward(self, x: torch.Tensor, pooled: torch.Tensor) -> torch.Tensor:
        return self.predictions(x).sum() + self.seq_relationship(pooled).sum()


class BertForPreTraining(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.bert = BertModel(c, pooler=True)
        self.cls = BertPreTrainingHeads(c, self.bert.embeddings.word_embeddings)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x, pooled = self.bert(ids)
        assert pooled is not None
        return self.cls(x, pooled)


class BertForQuestionAnswering(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.bert = BertModel(c, pooler=False)
        self.qa_outputs = nn.Linear(c.hidden, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x, _ = self.bert(ids)
        return self.qa_outputs(x)


@dataclass(frozen=True)
class GPT2Config:
    vocab: int = 50257
    positions: int = 1024
    hidden: int = 768
    layers: int = 12
    heads: int = 12


class Conv1D(nn.Module):
    """HF GPT-2's linear layer: weight stored (in, out), y = x W + b."""

    def __init__(self, nf: int, nx: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = (*x.shape[:-1], self.weight.shape[1])
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).view(shape)


class GPT2Attention(nn.Module):
    def __init__(self, c: GPT2Config):
        super().__init__()
        self.heads = c.heads
        self.c_attn = Conv1D(3 * c.hidden, c.hidden)
        self.c_proj = Conv1D(c.hidden, c.hidden)
        self.attn_dropout = nn.Dropout(0.1)
        self.resid_dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.c_attn(x).split(h, dim=2)

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, self.heads, h // self.heads).transpose(1, 2)

        q, k, v = split(q), split(k), split(v)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(h // self.heads)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        probs = self.attn_dropout(F.softmax(scores, dim=-1))
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, h)
        return self.resid_dropout(self.c_proj(out))


class GPT2MLP(nn.Module):
    def __init__(self, c: GPT2Config):
        super().__init__()
        self.c_fc = Conv1D(4 * c.hidden, c.hidden)
        self.c_proj = Conv1D(c.hidden, 4 * c.hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x), approximate="tanh")))


class GPT2Block(nn.Module):
    def __init__(self, c: GPT2Config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.hidden)
        self.attn = GPT2Attention(c)
        self.ln_2 = nn.LayerNorm(c.hidden)
        self.mlp = GPT2MLP(c)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, c: GPT2Config):
        super().__init__()
        self.wte = nn.Embedding(c.vocab, c.hidden)
        self.wpe = nn.Embedding(c.positions, c.hidden)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList(GPT2Block(c) for _ in range(c.layers))
        self.ln_f = nn.LayerNorm(c.hidden)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
        x = self.drop(self.wte(ids) + self.wpe(positions))
        for block in self.h:
            x = block(x)
        return self.ln_f(x)


class GPT2LMHeadModel(nn.Module):
    def __init__(self, c: GPT2Config):
        super().__init__()
        self.transformer = GPT2Model(c)
        self.lm_head = nn.Linear(c.hidden, c.vocab, bias=False)
        self.lm_head.weight = self.transformer.wte.weight  # tied

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.transformer(ids))


@dataclass(frozen=True)
class LlamaConfig:
    vocab: int = 32000
    hidden: int = 4096
    layers: int = 32
    heads: int = 32
    intermediate: int = 11008
    eps: float = 1e-5
    rope_theta: float = 10000.0


class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.heads = c.heads
        self.theta = c.rope_theta
        self.q_proj = nn.Linear(c.hidden, c.hidden, bias=False)
        self.k_proj = nn.Linear(c.hidden, c.hidden, bias=False)
        self.v_proj = nn.Linear(c.hidden, c.hidden, bias=False)
        self.o_proj = nn.Linear(c.hidden, c.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        d = h // self.heads

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(b, s, self.heads, d).transpose(1, 2)

        q, k, v = split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x))
        inv = 1.0 / self.theta ** (torch.arange(0, d, 2, device=x.device).float() / d)
        freqs = torch.outer(torch.arange(s, device=x.device).float(), inv)
        angles = torch.cat((freqs, freqs), dim=-1)
        cos, sin = angles.cos(), angles.sin()
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        probs = F.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        return self.o_proj(torch.matmul(probs, v).transpose(1, 2).reshape(b, s, h))


class LlamaMLP(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.up_proj = nn.Linear(c.hidden, c.intermediate, bias=False)
        self.down_proj = nn.Linear(c.intermediate, c.hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.self_attn = LlamaAttention(c)
        self.mlp = LlamaMLP(c)
        self.input_layernorm = LlamaRMSNorm(c.hidden, c.eps)
        self.post_attention_layernorm = LlamaRMSNorm(c.hidden, c.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x))
        return x + self.mlp(self.post_attention_layernorm(x))


class LlamaModel(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.embed_tokens = nn.Embedding(c.vocab, c.hidden)
        self.layers = nn.ModuleList(LlamaDecoderLayer(c) for _ in range(c.layers))
        self.norm = LlamaRMSNorm(c.hidden, c.eps)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(ids)
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


class LlamaForCausalLM(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.model = LlamaModel(c)
        self.lm_head = nn.Linear(c.hidden, c.vocab, bias=False)  # not tied in Llama 2

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.model(ids))


class RNNModel(nn.Module):
    """AWD-LSTM's RNNModel as ByteComp's `lstm/model.py` configures it: tied, no weight drop."""

    def __init__(self, vocab: int, hidden: int, layers: int, dropout: float = 0.65):
        super().__init__()
        self.encoder = nn.Embedding(vocab, hidden)
        self.rnns = nn.ModuleList(nn.LSTM(hidden, hidden) for _ in range(layers))
        self.decoder = nn.Linear(hidden, vocab)
        self.decoder.weight = self.encoder.weight  # tied (`--tied`)
        self.drop = nn.Dropout(dropout)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.drop(self.encoder(ids.t()))  # (seq_len, batch, hidden), nn.LSTM's layout
        for rnn in self.rnns:
            x, _ = rnn(x)
        return self.decoder(self.drop(x))


def bert_pretraining(large: bool) -> nn.Module:
    return BertForPreTraining(BERT_LARGE if large else BERT_BASE)


def bert_squad(large: bool) -> nn.Module:
    c = BERT_LARGE if large else BERT_BASE
    return BertForQuestionAnswering(BertConfig(**{**c.__dict__, "vocab": 30528}))


def gpt2(size: str = "small") -> nn.Module:
    hidden, layers, heads = {
        "small": (768, 12, 12),
        "medium": (1024, 24, 16),
        "large": (1280, 36, 20),
        "xl": (1600, 48, 25),
    }[size]
    return GPT2LMHeadModel(GPT2Config(hidden=hidden, layers=layers, heads=heads))


def llama2_7b() -> nn.Module:
    return LlamaForCausalLM(LlamaConfig())


def lstm() -> nn.Module:
    return RNNModel(vocab=33278, hidden=1500, layers=2)


def tiny_transformer() -> nn.Module:
    return GPT2LMHeadModel(GPT2Config(vocab=1000, positions=64, hidden=64, layers=2, heads=4))
