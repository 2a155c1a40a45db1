"""The Google ADK adapter feeds a ``usage_anchored`` counter from each model call's reported
usage: ``context_policy_callback`` (a ``before_model_callback``) finds the previous call's
``usage_metadata.prompt_token_count`` among the session's events and records it for the input it
sent.

The model is a fake ``BaseLlm`` inside ``InMemoryRunner`` runs (a tool call on each question, an
answer after the tool's response) that reports as its prompt tokens what a "provider tokenizer"
counts of what it received: the words of every text, 3 per content (and for the system
instruction and the tools) and ``OVERHEAD`` per request, the provider's own framing that no
local counter knows. No network, no key. Marked ``extras``; each test runs on both kernels.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types

from contextpolicy.adapters.google_adk import context_policy_callback
from contextpolicy.counters import usage_anchored
from tests.support.usage_replay import FramedCounter

pytestmark = [pytest.mark.extras, pytest.mark.usefixtures("pipeline_kernel")]

INSTRUCTION = "You track parcels. Use the lookup tool, then answer in one line."
OVERHEAD = 300
TRIGGER = 1_200
TURNS = 8
NEVER = 10**6


def policy(trigger: int) -> dict[str, Any]:
    return {"mode": "reduce", "triggerTokens": trigger, "targetInputTokens": trigger // 2,
            "steps": [{"id": "recent", "kind": "trim", "fragmentId": "history",
                       "targetChars": 2_000, "keepGroups": 1,
                       "grouping": {"kind": "user-turn"}}]}


async def summarise(request: Any) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": "(summary)"}]


# A policy whose handler is a coroutine function (the callback then returns an awaitable).
ASYNC = {"mode": "reduce", "triggerTokens": NEVER, "steps": [
    {"id": "sum", "kind": "compress", "fragmentId": "history", "targetChars": 1_000,
     "handlerId": "summarise"}]}


# ---------------------------------------------------------------------------------------------
# The provider's tokenizer over what the model received, and the local counters.


def words(text: str) -> int:
    return len(text.split())


def part_words(part: Any) -> int:
    if part.function_call:
        call = part.function_call
        return words(f"{call.name} {json.dumps(call.args, ensure_ascii=False)}")
    if part.function_response:
        return words(json.dumps(part.function_response.response, ensure_ascii=False,
                                separators=(",", ":")))  # the compact JSON the adapter counts
    return words(part.text or "")


def content_tokens(contents: list[Any]) -> int:
    """The provider's count of contents: 3 and the words of all the parts of each."""
    return sum(3 + sum(part_words(p) for p in c.parts or ()) for c in contents)


def provider_tokens(request: LlmRequest) -> int:
    config = request.config
    tools = json.dumps([t.model_dump(mode="json", exclude_none=True) for t in config.tools],
                       ensure_ascii=False, separators=(",", ":"))
    return (OVERHEAD + 3 + words(config.system_instruction) + 3 + words(tools)
            + content_tokens(request.contents))


def block_words(block: dict[str, Any]) -> int:
    kind = block.get("type")
    if kind == "tool_use":
        return words(f"{block['name']} {json.dumps(block['input'], ensure_ascii=False)}")
    if kind == "tool_result":
        return words(block["content"])
    return words(block.get("text") or block.get("thinking") or "")


def chat_words(messages: list[dict[str, Any]]) -> int:
    total = 0
    for m in messages:
        content = m.get("content")
        total += 3 + (words(content) if isinstance(content, str)
                      else sum(block_words(b) for b in content or []))
    return total


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
    """What the model received, and the prompt tokens it reported, call by call."""

    def __init__(self) -> None:
        self.received: list[list[Any]] = []
        self.reported: list[int] = []

    def model(self) -> BaseLlm:
        provider = self

        class Fake(BaseLlm):
            async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False,
                                             ) -> AsyncGenerator[LlmResponse, None]:
                contents = llm_request.contents
                provider.received.append(list(contents))
                provider.reported.append(provider_tokens(llm_request))
                if any(p.function_response for p in contents[-1].parts or ()):
                    part = types.Part(text="It is at the depot, on the shelf by the door.")
                else:
                    part = types.Part(function_call=types.FunctionCall(
                        name="lookup", args={"q": contents[-1].parts[0].text[:12]}))
                usage = types.GenerateContentResponseUsageMetadata(
                    prompt_token_count=provider.reported[-1], candidates_token_count=9)
                yield LlmResponse(content=types.Content(role="model", parts=[part]),
                                  usage_metadata=usage)

        return Fake(model="fake")


def lookup(q: str) -> str:
    """Where a parcel is."""
    return f"{q}: " + "scanned at the depot; " * 40


def converse(policy_: dict[str, Any], counter: Any, cut: str = "stable",
             turns: int = TURNS) -> tuple[Provider, list[Any], Any]:
    """``turns`` questions through an agent whose ``before_model_callback`` is the adapter; the
    provider, every call's result, and the callback."""
    results: list[Any] = []
    keep = context_policy_callback(policy_, counter=counter, cut=cut, on_report=results.append,
                                   handlers={"summarise": summarise} if policy_ is ASYNC else None)
    provider = Provider()
    agent = LlmAgent(name="tracker", model=provider.model(), instruction=INSTRUCTION,
                     tools=[lookup], before_model_callback=keep)
    runner = InMemoryRunner(agent=agent, app_name="app")
    session = asyncio.run(runner.session_service.create_session(app_name="app", user_id="u"))
    for t in range(turns):
        message = types.Content(role="user", parts=[types.Part(
            text=f"question {t}: where is parcel P-{t} now, and when does it arrive?")])
        for _ in runner.run(user_id="u", session_id=session.id, new_message=message):
            pass
    assert len(provider.received) == len(results) == 2 * turns
    return provider, [r.report for r in results], keep


def first_fired(reports: list[Any]) -> int:
    return next(k for k, r in enumerate(reports) if r.triggered)


# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["stable", "plain", "async"])
def test_each_call_counts_from_the_previous_calls_reported_usage(variant):
    counter = usage_anchored(local_words())
    provider, reports, keep = converse(ASYNC if variant == "async" else policy(NEVER), counter,
                                       cut="plain" if variant == "plain" else "stable")
    assert keep.is_async == (variant == "async")

    first = reports[0].before
    assert first.tokens_reported is None and first.tokens == provider.reported[0] - OVERHEAD
    for k in range(1, len(reports)):
        before, sent = reports[k].before, provider.received[k - 1]
        received = provider.received[k]
        # Nothing fired: each call gets what the previous one got, and what came after it.
        assert received[:len(sent)] == sent
        assert before.tokens_reported == provider.reported[k - 1]
        assert before.tokens == provider.reported[k - 1] + content_tokens(received[len(sent):])
        assert before.tokens == provider.reported[k]  # the provider's own count of it
        assert before.tokens_exact is True
    assert keep.last_report is reports[-1]
    # Every answer but the last was found at the next call.
    assert counter.anchors == len(reports) - 1


def test_a_counter_that_is_not_usage_anchored_records_nothing():
    provider, reports, keep = converse(policy(NEVER), local_words(), turns=3)
    assert keep.calls is None
    for report, reported in zip(reports, provider.reported, strict=True):
        assert report.before.tokens_reported is None
        assert report.before.tokens == reported - OVERHEAD  # the local count alone


def test_a_callback_called_without_a_session_records_nothing():
    counter = usage_anchored(local_words())
    keep = context_policy_callback(policy(NEVER), counter=counter)
    request = LlmRequest(contents=[types.Content(role="user", parts=[types.Part(text="hi")])])
    keep(None, request)
    keep(None, request)
    assert counter.anchors == 0 and keep.last_report.before.tokens_reported is None


@pytest.mark.parametrize("cut", ["stable", "plain"])
def test_a_token_trigger_fires_where_the_providers_count_passes_it(cut):
    anchored, anchored_reports, _ = converse(policy(TRIGGER), usage_anchored(local_words()), cut)
    exact, exact_reports, _ = converse(policy(TRIGGER), provider_words(), cut)
    _, local_reports, _ = converse(policy(TRIGGER), local_words(), cut)
    whole, _, _ = converse(policy(NEVER), local_words(), cut)  # the same calls, never reduced

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
