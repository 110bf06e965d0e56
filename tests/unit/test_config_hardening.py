"""Settings refuse ambiguous API keys and loose types."""

from __future__ import annotations

import pytest

from gaama.config import hash_api_key, load_settings
from gaama.errors import ConfigError


def test_keys_of_tenants_differing_by_case_are_refused() -> None:
    keys = [
        {"key_sha256": hash_api_key("k1"), "tenant": "t1"},
        {"key_sha256": hash_api_key("k2"), "tenant": "T1"},
    ]
    with pytest.raises(ConfigError, match=r"GAAMA_API_KEYS.*differ only by case.*'t1'/'T1'"):
        load_settings(api_keys=keys)


def test_loose_config_types_are_refused() -> None:
    with pytest.raises(ConfigError, match="GAAMA_API_KEYS"):
        load_settings(api_keys=[{"key_sha256": "0" * 64, "tenant": "t", "extra": 1}])
