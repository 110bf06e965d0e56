"""Reading an LLM's replies: the JSON object in an answer, how long a server asks us to wait,
and the two ways an attempt fails (worth repeating, or unusable output)."""

from __future__ import annotations

import re
from typing import Any

from pydantic_core import from_json

_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)


class Transient(Exception):
    """One failed attempt that may succeed if repeated."""

    def __init__(self, reason: str, detail: str, retry_after: float | None = None) -> None:
        super().__init__(detail)
        self.reason = reason
        self.retry_after = retry_after


class BadOutput(Exception):
    """An answer that arrived but is not a usable JSON object."""


def parse_json_object(text: str) -> dict[str, Any]:
    """Parse the JSON object in ``text``, tolerating Markdown fences and surrounding prose.

    Args:
        text: Model output.

    Returns:
        The parsed object.

    Raises:
        ValueError: no JSON object can be read from ``text``.
    """
    candidates = [text.strip()]
    candidates += [m.group(1).strip() for m in _FENCE.finditer(text)]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for cand in candidates:
        if not cand:
            continue
        try:
            obj = from_json(cand)  # bounded nesting: a pathological answer is an error, not a crash
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    raise ValueError(f"no JSON object in model output ({len(text)} chars): {text[:200]!r}")


def retry_after_s(response: Any) -> float | None:
    """Seconds asked for by ``retry-after-ms`` / ``retry-after`` (numeric forms only)."""
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue  # an HTTP date: rare from LLM servers; fall back to our own backoff
        if seconds >= 0:
            return seconds
    return None
