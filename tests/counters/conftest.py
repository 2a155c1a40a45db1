"""The tokenizer files the counters' suites load, built once per module."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def word_json(tmp_path_factory) -> Path:
    from tests.support.tiny_tokenizers import save_word_json

    return save_word_json(tmp_path_factory)


@pytest.fixture(scope="module")
def bpe_json(tmp_path_factory) -> Path:
    from tests.support.tiny_tokenizers import save_bpe_json

    return save_bpe_json(tmp_path_factory)
