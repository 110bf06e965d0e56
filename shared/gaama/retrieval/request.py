"""A search request's bounds and parameters, and what a search returns.

:func:`resolve_params` applies a request's overrides to the settings within their bounds;
:func:`pool_size` sizes the KNN pool for a ranked list and a budget (the choice is in
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
from gaama.retrieval.tokencount import BUDGET_UNITS, BudgetUnit

Mode = Literal["gaama", "semantic", "ppr"]
MODES: tuple[Mode, ...] = ("gaama", "semantic", "ppr")
K_MAX = 200
BUDGET_MIN, BUDGET_MAX = 10, 20000
WORDS_PER_ITEM = 20  # typical words of one item, to size the pool for a word budget
#: Typical tokens of one item, to size the pool for a token budget: WordPiece gives English
#: memory text about 1.4 tokens a word (docs/decisions/0161-token-budgets.md).
TOKENS_PER_ITEM = 28


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
    tokens: int | None = None  # the packed memory's tokens, when the budget is in tokens

    @property
    def memory_text(self) -> str:
        return render_memory(self.memory)


def budget_of(params: RetrievalSettings) -> int:
    """The budget in its unit: ``budget_words`` or ``budget_tokens``."""
    return params.budget_tokens if params.budget_unit == "tokens" else params.budget_words


def pool_size(k: int, params: RetrievalSettings, mode: Mode = "semantic") -> int:
    """The KNN pool of a search in ``mode``:
    ``max(2·k, floor, ⌈budget_words / WORDS_PER_ITEM⌉)`` (a token budget: ``⌈budget_tokens /
    TOKENS_PER_ITEM⌉``), where the floor is ``pool_min`` in ``semantic`` mode (the pool is its
    only source of candidates) and ``max(seeds, graph_pool_min)`` in ``gaama`` and ``ppr`` (the
    expansion's read-ahead adds candidates reached from the seeds). Why:
    :mod:`gaama.retrieval.search`."""
    floor = params.pool_min if mode == "semantic" else max(params.seeds, params.graph_pool_min)
    per_item = TOKENS_PER_ITEM if params.budget_unit == "tokens" else WORDS_PER_ITEM
    return max(2 * k, floor, math.ceil(budget_of(params) / per_item))


def resolve_params(
    base: RetrievalSettings,
    overrides: Mapping[str, object] | None,
    budget: int | None = None,
    budget_unit: BudgetUnit | None = None,
) -> RetrievalSettings:
    """Settings with per-request overrides applied, validated within the settings' bounds.

    ``budget`` is in ``budget_unit`` (None: the settings' unit) and sets ``budget_words`` or
    ``budget_tokens``.

    Raises:
        ValidationError: an unknown parameter or unit, or a value out of bounds (the message
            names it).
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
    if budget_unit is not None:
        if budget_unit not in BUDGET_UNITS:
            raise ValidationError(f"budget_unit must be one of {', '.join(BUDGET_UNITS)}")
        merged["budget_unit"] = budget_unit
    if budget is not None:
        unit = merged["budget_unit"]
        if not BUDGET_MIN <= budget <= BUDGET_MAX:
            raise ValidationError(f"budget must be within {BUDGET_MIN}..{BUDGET_MAX} {unit}")
        merged["budget_tokens" if unit == "tokens" else "budget_words"] = budget
    try:
        return RetrievalSettings.model_validate(merged)
    except PydanticValidationError as exc:
        msgs = [f"params.{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
        raise ValidationError("; ".join(msgs)) from None
