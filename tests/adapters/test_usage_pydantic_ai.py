"""The Pydantic AI adapter feeds a ``usage_anchored`` counter from each request's reported usage:
the processor (persist, under ``ProcessHistory``) from the ``ModelResponse`` that follows the
messages it returned, the capability (ephemeral) from the response it is handed.

The model is a ``FunctionModel`` that calls ``lookup`` on a question and answers after its
return, and reports as its input tokens what a "provider tokenizer" counts of what it received:
the words of every text, 3 per message (a response, a part of a request, the instructions, the
tools) and ``OVERHEAD`` per request, the provider's own framing that no local counter knows.
No network. Marked ``extras``; each test runs on both kernels.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from contextpolicy.adapters.pydantic_ai import ContextPolicyCapability, ContextPolicyProcessor
from contextpolicy.counters import usage_anchored
from tests.support.usage_replay import FramedCounter

pytestmark = [pytest.mark.extras, pytest.mark.usefixtures("pipeline_kernel")]

INSTRUCTIONS = "Answer from the lookup tool, briefly."
OVERHEAD = 300
TRIGGER = 1_200
TURNS = 8


def policy(trigger: int) -> dict[str, Any]:
    return {"mode": "reduce", "triggerTokens": trigger, "targetInputTokens": trigger // 2,
            "steps": [{"id": "trim", "kind": "trim", "fragmentId": "history", "field": "messages",
                       "grouping": {"kind": "user-turn"}, "keepGroups": 1,
                       "targetChars": 2_000}]}


# ---------------------------------------------------------------------------------------------
# The provider's tokenizer over what the model received, and the local counters.


def words(text: str) -> int:
    return len(text.split())


def part_text(part: Any) -> str:
    if isinstance(part, ToolCallPart):
        return f"{part.tool_name} {part.args_as_json_str()}"
    assert isinstance(part.content, str), part
    return part.content


def message_tokens(messages: list[Any]) -> int:
    """The provider's count of messages: 3 and the words of each part of a request, 3 and the
    words of all the parts of a response."""
    total = 0
    for message in messages:
        counted = [words(part_text(p)) for p in message.parts]
        total += 3 + sum(counted) if isinstance(message, ModelResponse) else 3 * len(counted) + sum(
            counted)
    return total


def offered(info: AgentInfo) -> str:
    return json.dumps([{"type": "function", "name": t.name, "description": t.description,
                        "parameters": t.parameters_json_schema} for t in info.function_tools],
                      ensure_ascii=False, separators=(",", ":"))


def provider_tokens(messages: list[Any], info: AgentInfo) -> int:
    assert info.instructions == INSTRUCTIONS
    return OVERHEAD + 3 + words(INSTRUCTIONS) + 3 + words(offered(info)) + message_tokens(messages)


def dict_words(message: dict[str, Any]) -> int:
    content = message.get("content")
    texts = [content] if isinstance(content, str) else [
        p.get("text") or p.get("thinking") or "" for p in content or []]
    texts += [f"{c['function']['name']} {c['function']['arguments']}"
              for c in message.get("tool_calls") or []]
    return sum(words(t) for t in texts)


def chat_words(messages: list[dict[str, Any]]) -> int:
    return sum(3 + dict_words(m) for m in messages)


def local_words() -> FramedCounter:
    """The local counter: 3 and the words of each chat message (the provider's tokenizer
    without its overhead)."""
    return FramedCounter(chat_words)


def provider_words() -> FramedCounter:
    """An exact local counter equal to the provider's tokenizer, its overhead included."""
    return FramedCounter(chat_words, OVERHEAD)


# ---------------------------------------------------------------------------------------------
# The model and the conversation.


class Provider:
    """A ``FunctionModel`` function: what it received, and the input tokens it reported."""

    def __init__(self) -> None:
        self.received: list[list[Any]] = []
        self.reported: list[int] = []

    def __call__(self, messages: list[Any], info: AgentInfo) -> ModelResponse:
        n = len(self.received)
        self.received.append(list(messages))
        self.reported.append(provider_tokens(messages, info))
        if any(isinstance(p, UserPromptPart) for p in messages[-1].parts):
            parts: list[Any] = [ToolCallPart("lookup", {"q": f"q{n}"}, tool_call_id=f"call_{n}")]
        else:
            parts = [TextPart(f"answer {n}: it is at the depot, on the shelf by the door.")]
        return ModelResponse(parts=parts, usage=RequestUsage(input_tokens=self.reported[-1]))


def lookup(q: str) -> str:
    """Look ``q`` up."""
    return f"result for {q}: " + "scanned at the depot " * 40


def converse(front: str, policy_: dict[str, Any], counter: Any,
             turns: int = TURNS) -> tuple[Provider, list[Any], Any]:
    """``turns`` runs through an agent with the adapter ``front`` (each run given the last one's
    history); the provider, every call's report, and the adapter."""
    reports: list[Any] = []
    provider = Provider()
    if front == "capability":
        adapter: Any = ContextPolicyCapability(policy_, counter=counter, on_report=reports.append)
        capability: Any = adapter
    else:
        adapter = ContextPolicyProcessor(policy_, counter=counter, on_report=reports.append)
        capability = ProcessHistory(adapter.areduce if front == "areduce" else adapter)
    agent = Agent(FunctionModel(provider), instructions=INSTRUCTIONS, tools=[lookup],
                  capabilities=[capability])
    history: list[Any] = []
    for t in range(turns):
        asked = f"question {t}: where is parcel P-{t} now, and when does it arrive?"
        history = agent.run_sync(asked, message_history=history).all_messages()
    assert len(provider.received) == len(reports) == 2 * turns
    return provider, reports, adapter


def first_fired(reports: list[Any]) -> int:
    return next(k for k, r in enumerate(reports) if r.triggered)


# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("front", ["processor", "areduce", "capability"])
def test_each_call_counts_from_the_previous_calls_reported_usage(front):
    counter = usage_anchored(local_words())
    provider, reports, adapter = converse(front, policy(10**6), counter)

    first = reports[0].before
    assert first.tokens_reported is None and first.tokens == provider.reported[0] - OVERHEAD
    for k in range(1, len(reports)):
        before, sent = reports[k].before, provider.received[k - 1]
        received = provider.received[k]
        # Nothing fired: each call gets what the previous one got, and what came after it.
        assert all(a is b for a, b in zip(sent, received[:len(sent)], strict=True))
        assert before.tokens_reported == provider.reported[k - 1]
        assert before.tokens == provider.reported[k - 1] + message_tokens(received[len(sent):])
        assert before.tokens == provider.reported[k]  # the provider's own count of it
        assert before.tokens_exact is True
    assert adapter.last_report is reports[-1]
    # The capability is handed each answer; the processor finds one at the next call.
    assert counter.anchors == len(reports) - (front != "capability")


@pytest.mark.parametrize("front", ["processor", "capability"])
def test_a_counter_that_is_not_usage_anchored_records_nothing(front):
    provider, reports, adapter = converse(front, policy(10**6), local_words(), turns=3)
    assert adapter._reducer.sent is None
    for report, reported in zip(reports, provider.reported, strict=True):
        assert report.before.tokens_reported is None
        assert report.before.tokens == reported - OVERHEAD  # the local count alone


@pytest.mark.parametrize("front", ["processor", "capability"])
def test_a_token_trigger_fires_where_the_providers_count_passes_it(front):
    anchored, anchored_reports, _ = converse(front, policy(TRIGGER), usage_anchored(local_words()))
    exact, exact_reports, _ = converse(front, policy(TRIGGER), provider_words())
    _, local_reports, _ = converse(front, policy(TRIGGER), local_words())

    whole, _, _ = converse(front, policy(10**6), local_words())  # the same calls, never reduced
    passed = next(k for k, n in enumerate(whole.reported) if n > TRIGGER)
    assert first_fired(anchored_reports) == passed == first_fired(exact_reports)
    # Call for call, the same decisions, the same inputs sent, the same figures after the first.
    assert [r.triggered for r in anchored_reports] == [r.triggered for r in exact_reports]
    assert anchored.reported == exact.reported
    assert ([r.before.tokens for r in anchored_reports[1:]]
            == [r.before.tokens for r in exact_reports[1:]])
    assert sum(r.triggered for r in anchored_reports) >= 2
    for report, reported in zip(anchored_reports[1:], anchored.reported[1:], strict=True):
        if not report.triggered:  # sent as it was counted: the provider's count of it
            assert report.before.tokens == reported
    # The local counter alone, short of the provider's overhead, fires later.
    assert first_fired(local_reports) > passed
