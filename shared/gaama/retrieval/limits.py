"""Per-request bounds: what one caller may make one search cost.

The operator sets them (``GAAMA_LIMITS__*``, :class:`gaama.config.RequestLimits`); a bound left
unset is the retrieval setting's own value, so a request may make a search cheaper than the
defaults but never dearer. A value above its bound is refused with a message naming the bound
and the setting that raises it.
"""

from __future__ import annotations

from collections.abc import Mapping

from gaama.config import RequestLimits, RetrievalSettings
from gaama.errors import ValidationError


def bounds(limits: RequestLimits, defaults: RetrievalSettings) -> dict[str, int]:
    """The effective maximum of every bounded parameter (``k`` and the budgets included)."""
    out = {"k": limits.k}
    for name in RequestLimits.model_fields:
        if name == "k":
            continue
        value = getattr(limits, name)
        out[name] = int(getattr(defaults, name) if value is None else value)
    return out


def check_request(
    limits: RequestLimits,
    defaults: RetrievalSettings,
    *,
    k: int | None = None,
    budget: int | None = None,
    params: Mapping[str, object] | None = None,
    budget_unit: str | None = None,
) -> None:
    """Refuse a request that asks for more than the operator allows.

    ``budget`` is in ``budget_unit`` (None: the defaults' unit): bounded by ``budget_words`` or
    ``budget_tokens``.

    Raises:
        ValidationError: naming the first parameter above its bound, the bound and the setting.
    """
    caps = bounds(limits, defaults)
    asked: dict[str, object] = dict(params or {})
    if k is not None:
        asked["k"] = k
    budget_field = (
        "budget_tokens" if (budget_unit or defaults.budget_unit) == "tokens" else "budget_words"
    )
    if budget is not None:
        asked[budget_field] = budget
    for name, value in asked.items():
        cap = caps.get(name)
        if cap is None or not isinstance(value, int | float) or isinstance(value, bool):
            continue  # unbounded here (alpha, weights...) or left to the settings' own checks
        if value > cap:
            shown = "budget" if name == budget_field and budget is not None else name
            where = "" if shown in ("k", "budget") else "params."
            raise ValidationError(
                f"{where}{shown} = {value:g} is above this service's limit of {cap} "
                f"(GAAMA_LIMITS__{name.upper()})"
            )
