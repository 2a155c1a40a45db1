"""The OpenAI Agents SDK adapter's ``ContextPolicySession`` over the SDK's ``SQLiteSession``:
what ``get_items`` returns is reduced and everything is stored, with an input filter too, and
the run's context reaches a session that takes it.

The fake model and the shared helpers are in ``tests/support/openai_agents.py``. Marked
``extras``: the main suite deselects it; CI runs it with ``pytest -m extras``.
"""

from __future__ import annotations

from typing import Any

import agents
import pytest
from agents import Runner, SQLiteSession
from agents.memory import Session
from agents.run_context import RunContextWrapper

from contextpolicy.adapters.openai_agents import ContextPolicySession, context_policy_input_filter
from tests.support.openai_agents import (
    RecordingModel,
    Spy,
    assert_model_got_what_the_filter_kept,
    chars,
    make_agent,
    orphans,
    question,
    run,
    run_config,
    trim,
)

pytestmark = [pytest.mark.extras, pytest.mark.usefixtures("pipeline_kernel")]


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """No key to reach OpenAI with, and no traces to export."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    agents.set_tracing_disabled(True)


# ---------------------------------------------------------------------------------------------
# The session wrapper.


def test_session_reduces_what_get_items_returns_and_stores_everything(tmp_path):
    store = SQLiteSession("chat", tmp_path / "chat.db")
    session = ContextPolicySession(store, trim(0, keep=1), cut="plain")
    assert isinstance(session, Session)
    assert session.session_id == "chat"
    model = RecordingModel()
    agent = make_agent(model)

    async def main() -> None:
        for n in range(3):
            await Runner.run(agent, f"question {n}", session=session, run_config=run_config())

    run(main())
    stored = run(store.get_items())
    assert len(stored) == 15
    assert [item.get("content") for item in stored if item.get("role") == "user"] == [
        "question 0", "question 1", "question 2"]
    # The third run's first model call: the newest stored turn only, then the new question.
    third = model.calls[4].snapshot
    assert third == [*stored[5:10], {"content": "question 2", "role": "user"}]
    assert orphans(third) == []
    report = session.last_report
    assert (report.steps[0].groups_before, report.steps[0].groups_after) == (2, 1)
    assert report.before.chars == chars(stored[:10])
    assert report.after.chars == chars(stored[5:10])
    # A session stores the history: no question, and an empty turn.
    assert [(f.id, f.messages_before) for f in report.fragments] == [
        ("history", 10), ("turn", 0)]

    # Reads through the wrapper: reduced in full, as stored with a limit (the SDK's tail checks).
    assert run(session.get_items()) == stored[10:]
    assert run(session.get_items(limit=2)) == stored[-2:]
    assert len(run(store.get_items())) == 15
    # Writes go to the store.
    run(session.add_items([question("added")]))
    assert run(store.get_items(limit=1)) == [question("added")]
    assert run(session.pop_item()) == question("added")
    run(session.clear_session())
    assert run(store.get_items()) == []
    assert session.session_settings is getattr(store, "session_settings", None)
    assert session.db_path == store.db_path  # anything else is the wrapped session's
    store.close()


def test_session_in_memory_with_a_filter_too():
    store = SQLiteSession("memory")
    session = ContextPolicySession(store, {"mode": "validate"}, cut="plain")
    model = RecordingModel()
    spy = Spy(context_policy_input_filter(trim(0), cut="plain"))
    agent = make_agent(model)
    Runner.run_sync(agent, "first", session=session, run_config=run_config(spy))
    Runner.run_sync(agent, "second", session=session, run_config=run_config(spy))
    assert session.last_report.mode == "validate"
    assert len(run(store.get_items())) == 10
    # The filter sees the session's history and the new question, and keeps the question.
    assert model.calls[2].snapshot == [{"content": "second", "role": "user"}]
    assert_model_got_what_the_filter_kept(model, spy)
    store.close()


class ContextAwareSession:
    """A session whose methods take the run's context (``wrapper=``)."""

    def __init__(self) -> None:
        self.session_id = "aware"
        self.session_settings = None
        self.items: list[Any] = []
        self.wrappers: list[Any] = []

    async def get_items(self, limit: int | None = None, *, wrapper: Any = None) -> list[Any]:
        self.wrappers.append(wrapper)
        return list(self.items[-limit:] if limit else self.items)

    async def add_items(self, items: list[Any], *, wrapper: Any = None) -> None:
        self.wrappers.append(wrapper)
        self.items.extend(items)

    async def pop_item(self, *, wrapper: Any = None) -> Any:
        self.wrappers.append(wrapper)
        return self.items.pop() if self.items else None

    async def clear_session(self, *, wrapper: Any = None) -> None:
        self.wrappers.append(wrapper)
        self.items.clear()


@pytest.mark.skipif(not hasattr(agents.memory.session, "_session_accepts_wrapper"),
                    reason="this SDK hands no run context to sessions")
def test_session_hands_the_run_context_to_a_session_that_takes_it():
    inner = ContextAwareSession()
    session = ContextPolicySession(inner, trim(0), cut="plain")
    model = RecordingModel()
    Runner.run_sync(make_agent(model), "hello", session=session, run_config=run_config(),
                    context={"user": 7})
    assert inner.wrappers
    assert all(isinstance(w, RunContextWrapper) and w.context == {"user": 7}
               for w in inner.wrappers)
    assert len(inner.items) == 5

    plain = SQLiteSession("plain")
    wrapped = ContextPolicySession(plain, trim(0), cut="plain")
    run(wrapped.add_items([question("x")], wrapper=object()))  # not handed on
    assert run(plain.get_items()) == [question("x")]
    plain.close()
