"""A search request's bounds and parameters, and what a search returns.

:func:`resolve_params` applies a request's overrides to the settings within their bounds;
:func:`pool_size` sizes the KNN pool for a ranked list and a word budget (the choice is in
:mod:`gaama.retrieval.search`'s docstring).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import ValidationError as PydanticValidationError

from gaama.config import RetrievalSettings
from gaama.errors import ValidationError
from gaama.retrieval.pack import Item, render_memory

Mode = Literal["gaama", "semantic", "ppr"]
MODES: tuple[Mode, ...] = ("gaama", "semantic", "ppr")
K_MAX = 200
BUDGET_MIN, BUDGET_MAX = 10, 20000
WORDS_PER_ITEM = 20  # typical words of one item, to size the pool for a word budget


def check_request(mode: str, k: int, query: str) -> None:
    """Check a search's mode, ranked-list length and query.

    Raises:
        ValidationError: an unknown ``mode``, ``k`` outside 1..K_MAX or an empty ``query``.
    """
    if mode not in MODES:
        raise ValidationError(f"mode must be one of {', '.join(MODES)}")
    if not 1 <= k <= K_MAX:
        raise ValidationError(f"k must be within 1..{K_MAX}")
    if not query.strip():
        raise ValidationError("query must not be empty")


@dataclass(slots=True)
class SearchResult:
    """What one search returns: packed memory, top-k ranking and how it was computed."""

    mode: Mode
    memory: list[Item]
    ranked: list[Item]
    words: int
    timings_ms: dict[str, float]
    subgraph_nodes: int
    ppr_iterations: int
    params: RetrievalSettings  # the effective parameters, overrides applied

    @property
    def memory_text(self) -> str:
        return render_memory(self.memory)


def pool_size(k: int, params: RetrievalSettings, mode: Mode = "semantic") -> int:
    """The KNN pool of a search in ``mode``:
    ``max(2·k, floor, ⌈budget_words / WORDS_PER_ITEM⌉)``, where the floor is ``pool_min`` in
    ``semantic`` mode (the pool is its only source of candidates) and ``max(seeds,
    graph_pool_min)`` in ``gaama`` and ``ppr`` (the expansion's read-ahead adds candidates
    reached from the seeds). Why: :mod:`gaama.retrieval.search`."""
    floor = params.pool_min if mode == "semantic" else max(params.seeds, params.graph_pool_min)
    return max(2 * k, floor, math.ceil(params.budget_words / WORDS_PER_ITEM))


def resolve_params(
    base: RetrievalSettings, overrides: Mapping[str, object] | None, budget: int | None = None
) -> RetrievalSettings:
    """Settings with per-request overrides applied, validated within the settings' bounds.

    Raises:
        ValidationError: an unknown parameter or a value out of bounds (the message names it).
    """
    merged: dict[str, object] = base.model_dump()
    if overrides:
        unknown = sorted(set(overrides) - set(RetrievalSettings.model_fields))
        if unknown:
            raise ValidationError(
                f"unknown retrieval parameter(s) {', '.join(unknown)}; allowed: "
                f"{', '.join(RetrievalSettings.model_fields)}"
            )
        merged.update(overrides)
    if budget is not None:
        if not BUDGET_MIN <= budget <= BUDGET_MAX:
            raise ValidationError(f"budget must be within {BUDGET_MIN}..{BUDGET_MAX} words")
        merged["budget_words"] = budget
    try:
        return RetrievalSettings.model_validate(merged)
    except PydanticValidationError as exc:
        msgs = [f"params.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
        raise ValidationError("; ".join(msgs)) from None
