"""Prompt templates shipped as package data in ``gaama/llm/prompts/*.txt``.

Each template holds a system part and a user part separated by a line ``---- user ----``.
Placeholders use ``str.format`` syntax (``{chunk}``); literal braces must be doubled. Values are
substituted once, so braces inside the *values* (JSON in a conversation turn) are safe.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from functools import cache
from importlib import resources

from gaama.errors import ConfigError

#: The prompts that ship with the package.
PROMPT_NAMES = ("extract", "reflect", "answer", "judge_reward", "judge_binary")

_SEPARATOR = "---- user ----"


@dataclass(frozen=True, slots=True)
class Prompt:
    """A rendered prompt: the system message and the user message."""

    system: str
    user: str


@cache
def load_template(name: str) -> tuple[str, str]:
    """Read the template ``name`` and split it into (system, user) parts.

    Args:
        name: One of :data:`PROMPT_NAMES`.

    Returns:
        The raw system and user templates, placeholders not yet filled.

    Raises:
        ConfigError: the name is unknown or the file lacks the separator line.
    """
    if name not in PROMPT_NAMES:
        raise ConfigError(f"unknown prompt {name!r}; expected one of {', '.join(PROMPT_NAMES)}")
    text = resources.files("gaama.llm").joinpath("prompts", f"{name}.txt").read_text("utf-8")
    system, sep, user = text.partition(f"\n{_SEPARATOR}\n")
    if not sep:
        raise ConfigError(f"prompt {name!r} has no '{_SEPARATOR}' line")
    return system.strip(), user.strip()


def placeholders(name: str) -> set[str]:
    """The placeholder names used by template ``name`` (both parts)."""
    found: set[str] = set()
    for part in load_template(name):
        for _, field, _, _ in string.Formatter().parse(part):
            if field:
                found.add(field)
    return found


def render(name: str, **values: str) -> Prompt:
    """Fill template ``name`` with ``values``.

    Args:
        name: One of :data:`PROMPT_NAMES`.
        **values: One string per placeholder of the template.

    Returns:
        The rendered :class:`Prompt`.

    Raises:
        ConfigError: a placeholder has no value or a value matches no placeholder; both are
            programming errors that a silent default would hide.
    """
    wanted = placeholders(name)
    missing = wanted - values.keys()
    extra = values.keys() - wanted
    if missing or extra:
        raise ConfigError(
            f"prompt {name!r}: missing values {sorted(missing)}, unexpected values {sorted(extra)}"
        )
    system, user = load_template(name)
    return Prompt(system=system.format(**values), user=user.format(**values))
