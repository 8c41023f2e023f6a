"""Fixtures for the validator tests: a clean mini pack per test."""

from __future__ import annotations

import pytest

from tests.validator.packbuilder import make_pack


@pytest.fixture
def pack(tmp_path):
    return make_pack(tmp_path / "pack")
