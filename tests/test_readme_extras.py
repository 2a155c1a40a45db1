"""The README's examples of the optional extras (```python extras blocks: the token counters,
the LangChain middleware and LangGraph node, the OpenAI Agents SDK filter) run as written and
print what the README shows, in order in one namespace, with no network."""

from __future__ import annotations

import pytest

from .test_readme import blocks, run_blocks

pytestmark = pytest.mark.extras


def test_readme_extras_examples_print_what_they_show(monkeypatch):
    import socket

    def refuse(*args, **kwargs):
        raise OSError("the README's examples must not use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    pairs = blocks("python extras")
    assert len(pairs) >= 4
    run_blocks(pairs)
