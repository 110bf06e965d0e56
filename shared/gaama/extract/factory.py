"""Choose the extractor: an LLM when one is configured (or a cassette replays one), else offline."""

from __future__ import annotations

import logging
from typing import Any

from gaama.config import Settings
from gaama.extract.base import Extractor
from gaama.metrics import LLMMetrics

log = logging.getLogger("gaama.extract")


def build_extractor(settings: Settings, metrics: LLMMetrics | None = None) -> tuple[Extractor, Any]:
    """The extractor and the resource to close with it (an LLM client, or None)."""
    if settings.llm_enabled:
        from gaama.llm.client import LLMClient
        from gaama.llm.extractor import LLMExtractor

        client = LLMClient(settings, metrics=metrics)
        log.info(
            "extractor: LLM %s at %s (cassette %s)",
            settings.llm_model,
            settings.llm_base_url,
            settings.llm_cassette_mode,
        )
        return LLMExtractor(client), client
    from gaama.extract.offline import OfflineExtractor

    log.info("extractor: offline (no GAAMA_LLM_BASE_URL/GAAMA_LLM_MODEL configured)")
    return OfflineExtractor(), None
