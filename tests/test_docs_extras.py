"""The examples of the optional extras in the README and the documentation site (```` ```python
extras ```` blocks: the token counters, the LangChain middleware and LangGraph node, the OpenAI
Agents SDK, Ray and Hugging Face datasets) run as written and print what the page shows, each
alone, on both kernels, with the network refused."""

from __future__ import annotations

import pytest

from .docs_examples import Block, all_blocks, check_python, copy_examples

pytestmark = pytest.mark.extras

EXTRAS = all_blocks("python extras")


@pytest.fixture
def offline(monkeypatch, tmp_path):
    import socket

    def refuse(*args, **kwargs):
        raise OSError("the documentation's examples must not use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    copy_examples(tmp_path)
    monkeypatch.chdir(tmp_path)


@pytest.mark.usefixtures("pipeline_kernel", "offline")
@pytest.mark.parametrize("block", EXTRAS, ids=[b.where for b in EXTRAS])
def test_extras_example(block: Block):
    check_python(block)
