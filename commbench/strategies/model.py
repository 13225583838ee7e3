"""The model every strategy trains: a small decoder-only transformer (GPT-2 layout).

Token embedding + learned positions, `layers` pre-LayerNorm blocks (multi-head causal
self-attention, then an MLP of 4 x hidden with GELU), a final LayerNorm and an LM head that is
*not* tied to the embedding (a pipeline keeps them on different stages; untied, no stage
needs a gradient of another's weight). The loss is the cross-entropy of the next token.

One class serves every strategy:
- data parallel (DDP, ZeRO): the whole model, `build_model`;
- tensor parallel: `shard_for_tp` keeps a rank's columns of QKV and MLP-up and its rows of the
  attention-out and MLP-down weights (heads split across ranks), Megatron-style, with the two
  communicating autograd functions of `TPGroup` around each parallel pair;
- pipeline parallel: `stage_for_pp` keeps a rank's contiguous slice of blocks, the embeddings
  on the first stage, the final norm and head on the last.
Every rank builds the whole model from the seed first, so replicated parts and shards start
from the same weights as the data-parallel model: one seed, one model, whatever the strategy.
"""

import math
from dataclasses import dataclass

import torch
import torch.distributed
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class ModelConfig:
    hidden: int = 256
    layers: int = 4
    heads: int = 4
    vocab: int = 1024
    seq: int = 64

    @property
    def params(self):
        """Parameters of the whole model: embeddings 2·V·h... (untied head), positions s·h,
        per block 12·h² + 13·h (QKV 3h²+3h, out h²+h, up 4h²+4h, down 4h²+h, 2 norms 4h),
        final norm 2·h."""
        h = self.hidden
        return 2 * self.vocab * h + self.seq * h + self.layers * (12 * h * h + 13 * h) + 2 * h

    def tp_params(self, n):
        """Parameters a tensor-parallel rank holds at TP size n: embeddings, positions, norms,
        head and the row-parallel biases replicated, the rest split n ways."""
        h = self.hidden
        return (2 * self.vocab * h + self.seq * h + 2 * h
                + self.layers * ((12 * h * h + 7 * h) // n + 6 * h))

    def pp_layers(self, n):
        """[(first, end)] block range of each of n pipeline stages, as even as possible (the
        first `layers % n` stages hold one more)."""
        base, extra = divmod(self.layers, n)
        ranges, start = [], 0
        for stage in range(n):
            end = start + base + (1 if stage < extra else 0)
            ranges.append((start, end))
            start = end
        return ranges

    def pp_params(self, n, stage):
        h = self.hidden
        first, end = self.pp_layers(n)[stage]
        count = (end - first) * (12 * h * h + 13 * h)
        if stage == 0:
            count += self.vocab * h + self.seq * h
        if stage == n - 1:
            count += 2 * h + self.vocab * h
        return count


class _Identity:
    @staticmethod
    def apply(x):
        return x


class TPGroup:
    """The tensor-parallel group's two autograd functions (Megatron's f and g): `enter` before a
    column-parallel linear (identity forward, all_reduce of the gradient backward) and `leave`
    after a row-parallel one (all_reduce forward, identity backward). Both call
    torch.distributed.all_reduce at call time, synchronously, so the accounting sees them."""

    def __init__(self, size, rank):
        self.size, self.rank = size, rank

        class Enter(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x

            @staticmethod
            def backward(ctx, grad):
                grad = grad.contiguous().clone()
                torch.distributed.all_reduce(grad)
                return grad

        class Leave(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                x = x.contiguous()
                torch.distributed.all_reduce(x)
                return x

            @staticmethod
            def backward(ctx, grad):
                return grad

        self.enter, self.leave = Enter, Leave


class Block(nn.Module):
    """Pre-LN block. At TP size n it holds heads/n heads: QKV and MLP-up split by output
    columns, attention-out and MLP-down by input rows (their biases replicated, added after
    the reduction)."""

    def __init__(self, config, tp=None):
        super().__init__()
        n = tp.size if tp is not None else 1
        h = config.hidden
        self.local_heads, self.head_dim = config.heads // n, h // config.heads
        local = self.local_heads * self.head_dim
        self.ln1 = nn.LayerNorm(h)
        self.qkv = nn.Linear(h, 3 * local)
        self.proj = nn.Linear(local, h, bias=False)
        self.proj_bias = nn.Parameter(torch.zeros(h))
        self.ln2 = nn.LayerNorm(h)
        self.up = nn.Linear(h, 4 * local)
        self.down = nn.Linear(4 * local, h, bias=False)
        self.down_bias = nn.Parameter(torch.zeros(h))
        self._enter = tp.enter if tp is not None else _Identity
        self._leave = tp.leave if tp is not None else _Identity

    def forward(self, x):
        b, s, _ = x.shape
        qkv = self.qkv(self._enter.apply(self.ln1(x)))
        q, k, v = (t.view(b, s, self.local_heads, self.head_dim).transpose(1, 2)
                   for t in qkv.chunk(3, dim=-1))
        attention = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        attention = attention.transpose(1, 2).reshape(b, s, self.local_heads * self.head_dim)
        x = x + self._leave.apply(self.proj(attention)) + self.proj_bias
        mlp = self.down(F.gelu(self.up(self._enter.apply(self.ln2(x)))))
        return x + self._leave.apply(mlp) + self.down_bias


class GPT(nn.Module):
    """The whole model, or one pipeline stage of it (`stage_for_pp` removes what the stage does
    not hold: without `tok` the input is the previous stage's activations, without `head` the
    output is this stage's activations instead of the loss)."""

    def __init__(self, config, tp=None):
        super().__init__()
        self.config = config
        h = config.hidden
        self.tok = nn.Embedding(config.vocab, h)
        self.pos = nn.Embedding(config.seq, h)
        self.blocks = nn.ModuleList(Block(config, tp) for _ in range(config.layers))
        self.ln_f = nn.LayerNorm(h)
        self.head = nn.Linear(h, config.vocab, bias=False)

    def forward(self, inputs, targets=None):
        if self.tok is not None:
            positions = torch.arange(inputs.shape[1], device=inputs.device)
            x = self.tok(inputs) + self.pos(positions)
        else:
            x = inputs
        for block in self.blocks:
            x = block(x)
        if self.head is None:
            return x
        logits = self.head(self.ln_f(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def _init_weights(model, layers):
    """GPT-2's: normal(0, 0.02) weights, zero biases, residual projections scaled by
    1/sqrt(2·layers); LayerNorms at (1, 0)."""
    for name, parameter in model.named_parameters():
        if "ln" in name:
            nn.init.ones_(parameter) if name.endswith("weight") else nn.init.zeros_(parameter)
        elif name.endswith("bias"):
            nn.init.zeros_(parameter)
        else:
            std = 0.02 / math.sqrt(2 * layers) if name.endswith(("proj.weight", "down.weight")) \
                else 0.02
            nn.init.normal_(parameter, 0.0, std)


def build_model(config, seed, dtype=torch.float32):
    """The whole model, the same on every rank for a seed."""
    torch.manual_seed(seed)
    model = GPT(config)
    with torch.no_grad():
        _init_weights(model, config.layers)
    return model.to(dtype)


def shard_for_tp(full, tp):
    """Rank tp.rank's tensor-parallel model: a copy of `full` with its share of each block."""
    config = full.config
    model = GPT(config, tp).to(next(full.parameters()).dtype)
    h, n, r = config.hidden, tp.size, tp.rank
    local = h // n
    with torch.no_grad():
        shared = {k: v for k, v in full.state_dict().items() if not k.startswith("blocks.")}
        model.load_state_dict(shared, strict=False)
        for mine, whole in zip(model.blocks, full.blocks):
            rows = torch.cat([torch.arange(part * h + r * local, part * h + (r + 1) * local)
                              for part in range(3)])
            mine.qkv.weight.copy_(whole.qkv.weight[rows])
            mine.qkv.bias.copy_(whole.qkv.bias[rows])
            mine.proj.weight.copy_(whole.proj.weight[:, r * local:(r + 1) * local])
            mine.up.weight.copy_(whole.up.weight[4 * r * local:4 * (r + 1) * local])
            mine.up.bias.copy_(whole.up.bias[4 * r * local:4 * (r + 1) * local])
            mine.down.weight.copy_(whole.down.weight[:, 4 * r * local:4 * (r + 1) * local])
            for name in ("ln1", "ln2"):
                getattr(mine, name).load_state_dict(getattr(whole, name).state_dict())
            mine.proj_bias.copy_(whole.proj_bias)
            mine.down_bias.copy_(whole.down_bias)
    return model


def stage_for_pp(full, stages, stage):
    """Pipeline stage `stage` of `stages`: `full` itself, cut down to its blocks (and the
    embeddings on the first stage, the final norm and head on the last)."""
    first, end = full.config.pp_layers(stages)[stage]
    full.blocks = nn.ModuleList(list(full.blocks)[first:end])
    if stage > 0:
        full.tok = full.pos = None
    if stage < stages - 1:
        full.ln_f = full.head = None
    return full


def count_params(model):
    return sum(p.numel() for p in model.parameters())


def synthetic_batches(config, micro_batch, micro_batches, seed, dp_rank, device):
    """The micro-batches (inputs, next-token targets) a data-parallel rank trains on at every
    step: random token ids from (seed, dp_rank), the same at every step, so the loss falls
    as the model learns them."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + dp_rank)
    tokens = torch.randint(0, config.vocab, (micro_batches, micro_batch, config.seq + 1),
                           generator=generator)
    return [(t[:, :-1].contiguous().to(device), t[:, 1:].contiguous().to(device)) for t in tokens]
