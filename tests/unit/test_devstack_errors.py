"""The dev stack's errors name the fix."""

from __future__ import annotations

import pytest

from gaama import devstack
from gaama.devstack import processes


def test_missing_package_names_the_fix():
    with pytest.raises(devstack.StackError, match=r"pip install -e '\.\[stack\]'"):
        processes._package_dir("gaama_no_such_package")
