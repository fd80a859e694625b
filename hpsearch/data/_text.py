"""Text that is on every machine with Python: no download, real prose and real code.

* ``python-docs`` — CPython's reference documentation as plain text. It ships with the
  interpreter as :mod:`pydoc_data.topics` (what ``help("if")`` prints): about 465,000
  characters of English prose and examples in 79 topics. Read character by character, it
  is the corpus of the next-character language model (the LSTM family's second task).
* ``docs-or-code`` — a two-class task for sequence classifiers: is a window of 64
  characters taken from that documentation (class 0) or from the Python source code of
  standard-library modules (class 1, :data:`CODE_MODULES`)? The documentation holds code
  examples and the code holds comments and docstrings, so the task is not trivial; a
  majority guess scores 0.5.

Both texts vary a little between Python versions; the split is fixed by the study's seed.
"""

from __future__ import annotations

import collections
import functools
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from hpsearch.data._split import DataSplit

#: Pure-Python standard-library modules whose source is the "code" class of docs-or-code.
CODE_MODULES = (
    "argparse",
    "bisect",
    "calendar",
    "csv",
    "dataclasses",
    "difflib",
    "enum",
    "fractions",
    "functools",
    "heapq",
    "json.decoder",
    "json.encoder",
    "pprint",
    "shlex",
    "statistics",
    "string",
    "textwrap",
    "configparser",
    "tokenize",
    "inspect",
)

MAX_VOCAB = 255


@functools.lru_cache(maxsize=1)
def python_docs_text() -> str:
    """The reference documentation of this Python, topic by topic in name order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name] for name in sorted(topics))


@functools.lru_cache(maxsize=1)
def python_code_text() -> str:
    """The source code of :data:`CODE_MODULES` that this Python has on disk."""
    parts = []
    for name in CODE_MODULES:
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin and spec.origin.endswith(".py"):
            parts.append(Path(spec.origin).read_text(encoding="utf-8"))
    if not parts:
        raise RuntimeError("docs-or-code: this Python has no standard-library sources on disk")
    return "\n\n".join(parts)


class CharVocab:
    """Characters as token ids: the most frequent characters of a text; id 0 is 'unknown'."""

    def __init__(self, chars: str) -> None:
        self.chars = chars
        self._ids = {c: i + 1 for i, c in enumerate(chars)}

    @classmethod
    def build(cls, *texts: str, max_size: int = MAX_VOCAB) -> CharVocab:
        counts: collections.Counter[str] = collections.Counter()
        for text in texts:
            counts.update(text)
        ranked = sorted(counts, key=lambda c: (-counts[c], c))[:max_size]
        return cls("".join(sorted(ranked)))

    @property
    def size(self) -> int:
        return len(self.chars) + 1

    def encode(self, text: str) -> torch.Tensor:
        import torch

        return torch.tensor([self._ids.get(c, 0) for c in text], dtype=torch.long)

    def decode(self, ids: Any) -> str:
        return "".join(self.chars[i - 1] if 0 < i <= len(self.chars) else "\ufffd" for i in ids)


def corpus_split(
    name: str, text: str, *, options: Mapping[str, Any], seed: int, source: str
) -> DataSplit:
    """A language-model split: the text cut into blocks of ``block`` characters.

    Options: ``max_chars`` (use only the first ones), ``block`` (default 257: 256 inputs,
    each predicting the next), ``val_fraction`` (default 0.1 of the blocks, chosen by seed).
    """
    from hpsearch.data._split import DataSplit, split_indices

    if options.get("max_chars"):
        text = text[: int(options["max_chars"])]
    block = int(options.get("block", 257))
    vocab = CharVocab.build(text)
    ids = vocab.encode(text)
    n_blocks = ids.shape[0] // block
    if n_blocks < 2:
        raise ValueError(f"{name}: {len(text)} characters make fewer than 2 blocks of {block}")
    blocks = ids[: n_blocks * block].view(n_blocks, block)
    train, val = split_indices(
        n_blocks, val_fraction=float(options.get("val_fraction", 0.1)), seed=seed
    )
    return DataSplit(
        name,
        blocks[train],
        None,
        blocks[val],
        None,
        info={
            "task": "language_model",
            "kind": "tokens",
            "input_shape": (block,),
            "vocab_size": vocab.size,
            "vocab": vocab.chars,
            "source": source,
            "n_chars": int(n_blocks * block),
        },
    )


def _windows(text: str, length: int) -> list[str]:
    out = []
    for i in range(0, len(text) - length + 1, length):
        w = text[i : i + length]
        if len(w.split()) >= 3:  # leave out blank and near-blank stretches
            out.append(w)
    return out


def docs_or_code(options: Mapping[str, Any], seed: int) -> DataSplit:
    """Windows of ``length`` (64) characters, ``per_class`` (2000) of each class, by seed."""
    import torch

    from hpsearch.data._split import classification_split

    length = int(options.get("length", 64))
    per_class = int(options.get("per_class", 2000))
    docs, code = python_docs_text(), python_code_text()
    vocab = CharVocab.build(docs, code)
    g = torch.Generator().manual_seed(seed)
    xs: list[torch.Tensor] = []
    ys: list[int] = []
    for label, text in enumerate((docs, code)):
        windows = _windows(text, length)
        pick = torch.randperm(len(windows), generator=g)[:per_class]
        xs.extend(vocab.encode(windows[int(i)]) for i in pick)
        ys.extend([label] * len(pick))
    x = torch.stack(xs)
    y = torch.tensor(ys, dtype=torch.long)
    return classification_split(
        "docs-or-code",
        x,
        y,
        options=options,
        seed=seed,
        info={
            "kind": "tokens",
            "vocab_size": vocab.size,
            "vocab": vocab.chars,
            "classes": ["documentation", "code"],
            "source": "pydoc_data.topics vs. the source of " + ", ".join(CODE_MODULES),
        },
    )
