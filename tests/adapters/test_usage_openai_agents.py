"""The OpenAI Agents SDK filter feeds a usage-anchored counter through its ``hooks``.

The fake model answers a question with a tool call and a tool's output with text, and reports
``Usage(input_tokens=...)``: its own "tokenizer" over what it was sent (the instructions, the
tools' schemas and every item: 3 a message plus the words of its JSON) plus ``HIDDEN`` tokens
of framing no local counter sees. No API key, no tracing, no network.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import agents
import pytest
from agents import Agent, RunConfig, Runner, Usage, function_tool
from agents.items import ModelResponse
from agents.models.interface import Model
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from pydantic import BaseModel

from contextpolicy.adapters.openai_agents import context_policy_input_filter
from contextpolicy.counters import usage_anchored
from tests.support.usage_replay import FramedCounter

pytestmark = [pytest.mark.extras, pytest.mark.usefixtures("pipeline_kernel")]

INSTRUCTIONS = "Answer from the lookup tool, briefly."
HIDDEN = 11
_ids = itertools.count()


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    agents.set_tracing_disabled(True)


@function_tool
def lookup(q: str) -> str:
    """Look ``q`` up."""
    return f"result for {q} from the depot"


TOOLS = json.dumps([{"type": "function", "name": "lookup", "description": "Look ``q`` up.",
                     "parameters": lookup.params_json_schema}], separators=(",", ":"))


def framed(messages: list[dict]) -> int:
    """3 tokens a message plus the words of its JSON."""
    return sum(3 + len(json.dumps(m, sort_keys=True).split()) for m in messages)


def local_words() -> FramedCounter:
    """The local counter: ``framed``, the provider's tokenizer without its overhead."""
    return FramedCounter(framed)


def provider_words() -> FramedCounter:
    """The provider's own count: ``framed`` plus ``HIDDEN``."""
    return FramedCounter(framed, HIDDEN)


def as_dict(item: Any) -> dict:
    return item.model_dump(exclude_unset=True) if isinstance(item, BaseModel) else dict(item)


class ReportingModel(Model):
    def __init__(self, requests: int = 1) -> None:
        self.sent: list[list[dict]] = []
        self.reported: list[int] = []
        self.requests = requests

    async def get_response(self, system_instructions: str | None, input: Any, *args: Any,
                           **kwargs: Any) -> ModelResponse:
        items = [as_dict(i) for i in input]
        self.sent.append(items)
        self.reported.append(provider_words().count_messages([
            {"role": "system", "content": system_instructions},
            {"role": "system", "content": TOOLS}, *items]))
        uid, n = next(_ids), len(self.sent)
        if items[-1].get("role") == "user":
            output: Any = ResponseFunctionToolCall(
                id=f"fc_{uid}", call_id=f"call_{uid}", name="lookup", type="function_call",
                arguments=json.dumps({"q": f"parcel {n}"}), status="completed")
        else:
            output = ResponseOutputMessage(
                id=f"msg_{uid}", type="message", role="assistant", status="completed",
                content=[ResponseOutputText(type="output_text", text=f"answer {n} is in transit",
                                            annotations=[])])
        usage = Usage(requests=self.requests, input_tokens=self.reported[-1], output_tokens=3,
                      total_tokens=self.reported[-1] + 3)
        return ModelResponse(output=[output], usage=usage, response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


def policy(trigger: int = 10**6) -> dict:
    return {"mode": "reduce", "triggerTokens": trigger, "steps": [{
        "id": "trim", "kind": "trim", "fragmentId": "history", "keepGroups": 1,
        "targetChars": 0, "grouping": {"kind": "user-turn"}}]}


def run_agent(counter: Any, trigger: int = 10**6, turns: int = 2, requests: int = 1,
              ) -> tuple[ReportingModel, list[Any]]:
    """``turns`` questions, each a tool call and an answer; the report of every model call."""
    model = ReportingModel(requests)
    keep = context_policy_input_filter(policy(trigger), counter=counter)
    reports: list[Any] = []

    def spy(data: Any) -> Any:
        out = keep(data)
        reports.append(keep.last_report)
        return out

    agent = Agent(name="assistant", instructions=INSTRUCTIONS, model=model, tools=[lookup])
    config = RunConfig(call_model_input_filter=spy, tracing_disabled=True)
    items: list[Any] = []

    async def main() -> None:
        nonlocal items
        for i in range(turns):
            items = [*items, {"role": "user", "content": f"where is parcel {i} now"}]
            result = await Runner.run(agent, items, run_config=config, hooks=keep.hooks)
            items = result.to_input_list()

    asyncio.run(main())
    return model, reports


def test_each_call_is_counted_from_the_previous_report():
    model, reports = run_agent(usage_anchored(local_words()))
    assert len(reports) == len(model.reported) == 4
    assert reports[0].before.tokens_reported is None
    assert reports[0].before.tokens == model.reported[0] - HIDDEN
    for k in range(1, 4):
        before, added = reports[k].before, model.sent[k][len(model.sent[k - 1]):]
        assert model.sent[k][:len(model.sent[k - 1])] == model.sent[k - 1]
        assert before.tokens_reported == model.reported[k - 1]
        assert before.tokens == model.reported[k - 1] + framed(added) == model.reported[k]
        assert before.tokens_exact is True


def test_nothing_is_recorded_without_an_anchored_counter_or_for_several_requests():
    model, reports = run_agent(local_words())
    assert [r.before.tokens_reported for r in reports] == [None] * 4
    assert [r.before.tokens for r in reports] == [c - HIDDEN for c in model.reported]
    # A response that sums several requests counts no one input.
    _, reports = run_agent(usage_anchored(local_words()), requests=2)
    assert [r.before.tokens_reported for r in reports] == [None] * 4


def words(text: str) -> int:
    return len(text.split())


def test_a_token_trigger_fires_where_the_providers_count_passes_it():
    counts = run_agent(provider_words())[0].reported
    assert counts[1] + 2 < counts[2]
    trigger = counts[1] + 1
    expected = next(k for k, c in enumerate(counts) if c > trigger)

    def fired(counter: Any) -> int | None:
        reports = run_agent(counter, trigger)[1]
        return next((k for k, r in enumerate(reports) if r.triggered), None)

    assert fired(provider_words()) == fired(usage_anchored(words)) == expected == 2
    assert fired(words) != expected  # words alone miss the framing: later, if ever
