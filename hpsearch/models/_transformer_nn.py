"""The transformer's torch modules (imported on first use: it imports torch)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"width ({width}) must be a multiple of heads ({heads})")
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.dropout = dropout
        self.resid_drop = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0
        )
        return self.resid_drop(self.proj(y.transpose(1, 2).reshape(b, t, c)))


class Block(nn.Module):
    """Pre-norm residual block: causal self-attention, then a 4x GELU MLP."""

    def __init__(self, width: int, heads: int, dropout: float) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, dropout)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width),
            nn.GELU(),
            nn.Linear(4 * width, width),
            nn.Dropout(dropout),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Embed(nn.Module):
    """Token + learned position embeddings."""

    def __init__(self, vocab_size: int, width: int, max_len: int, dropout: float) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, width)
        self.positions = nn.Embedding(max_len, width)
        self.drop = nn.Dropout(dropout)
        self.max_len = max_len

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        t = idx.shape[1]
        if t > self.max_len:
            raise ValueError(f"sequence of {t} tokens is longer than max_len {self.max_len}")
        pos = torch.arange(t, device=idx.device)
        return self.drop(self.tokens(idx) + self.positions(pos))


class Head(nn.Module):
    """Final layer norm and the (untied) projection to the vocabulary."""

    def __init__(self, width: int, vocab_size: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, vocab_size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.norm(x))


class Stage(nn.Module):
    """A contiguous slice of a :class:`TransformerLM`, sharing its parameters."""

    def __init__(self, parts: list[nn.Module]) -> None:
        super().__init__()
        self.parts = nn.ModuleList(parts)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for part in self.parts:
            x = part(x)
        return x


class TransformerLM(nn.Module):
    """A decoder-only transformer over token ids: ``(B, T)`` ids to ``(B, T, V)`` logits.

    Args:
        vocab_size: number of tokens.
        width: model width (embedding size); a multiple of ``heads``.
        depth: number of transformer blocks.
        heads: attention heads per block.
        dropout: dropout on embeddings, attention and residual branches.
        max_len: the longest sequence (positions learned).

    Its parts run in order: ``embed`` (token + position), ``blocks``, ``head`` (layer
    norm + linear; not tied to the embedding, so the two can live on different pipeline
    stages). :meth:`stages` cuts it into ``n`` contiguous stages.

    Example:
        >>> import torch
        >>> from hpsearch.models import TransformerLM
        >>> model = TransformerLM(50, width=32, depth=2, heads=4, max_len=16)
        >>> model(torch.zeros(3, 16, dtype=torch.long)).shape
        torch.Size([3, 16, 50])
        >>> [len(list(s.parameters())) > 0 for s in model.stages(2)]
        [True, True]
    """

    def __init__(
        self,
        vocab_size: int,
        width: int = 64,
        depth: int = 2,
        heads: int = 4,
        dropout: float = 0.0,
        max_len: int = 256,
    ) -> None:
        super().__init__()
        self.embed = Embed(vocab_size, width, max_len, dropout)
        self.blocks = nn.ModuleList(Block(width, heads, dropout) for _ in range(depth))
        self.head = Head(width, vocab_size)
        self.apply(self._init)

    @staticmethod
    def _init(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.embed(idx)
        for block in self.blocks:
            x = block(x)
        return self.head(x)

    def stages(self, n: int) -> list[nn.Module]:
        """The model cut into ``n`` stages that run one after the other and share this
        model's parameters: the first holds the embeddings, the last the head, and the
        blocks are spread as evenly as possible (earlier stages get the extra ones).
        ``n`` may be at most ``depth + 1``."""
        depth = len(self.blocks)
        if not 1 <= n <= depth + 1:
            raise ValueError(
                f"a transformer of depth {depth} can be cut into 1 to {depth + 1} stages, not {n}"
            )
        if n == 1:
            return [Stage([self.embed, *self.blocks, self.head])]
        # Embeddings and head count as a block each for the balance.
        units: list[nn.Module] = [self.embed, *self.blocks, self.head]
        base, extra = divmod(len(units), n)
        out: list[nn.Module] = []
        i = 0
        for s in range(n):
            size = base + (1 if s < extra else 0)
            out.append(Stage(units[i : i + size]))
            i += size
        return out
