"""The Google ADK adapter: ``context_policy_callback`` as an ``LlmAgent``'s
``before_model_callback`` inside ``InMemoryRunner`` runs, the model a fake ``BaseLlm`` that
records every request (a tool call on each question, an answer after the tool's response). No
network, no key. Marked ``extras``: CI runs it after installing ``[google-adk]``."""

from __future__ import annotations

import asyncio
import copy
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

from contextpolicy import ContextPlanError, ContextPolicyError
from contextpolicy.accounting import measure_messages
from contextpolicy.adapters.google_adk import (
    INSTRUCTION_BEGIN,
    INSTRUCTION_END,
    content_dicts,
    context_policy_callback,
    is_instruction,
    request_tools,
)
from contextpolicy.handlers import clear_tool_results
from contextpolicy.replay import price_calls

pytestmark = [pytest.mark.extras, pytest.mark.usefixtures("pipeline_kernel")]

INSTRUCTION = "You track parcels. Use the lookup tool, then answer in one line."
TRIGGER, TARGET = 20_000, 10_000
POLICY = {"mode": "reduce", "triggerChars": TRIGGER, "targetInputChars": TARGET, "steps": [
    {"id": "recent", "kind": "trim", "fragmentId": "history", "targetChars": TARGET,
     "keepGroups": 1, "grouping": {"kind": "user-turn"}}]}


def lookup(q: str) -> str:
    """Where a parcel is."""
    return f"{q}: " + "scanned at the depot; " * 140  # ~3,000 chars


class Recorder:
    """Each request the model got: its contents (the list, and a deep copy) and config; and
    the contents ADK handed the callback."""

    def __init__(self) -> None:
        self.requests: list[tuple[list[Any], list[Any], Any]] = []
        self.handed: list[list[Any]] = []


def fake_model(recorder: Recorder) -> BaseLlm:
    class Fake(BaseLlm):
        async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False,
                                         ) -> AsyncGenerator[LlmResponse, None]:
            contents = llm_request.contents
            recorder.requests.append((list(contents), copy.deepcopy(contents),
                                      llm_request.config))
            last = [c for c in contents if not is_instruction(c)][-1]
            if any(p.function_response for p in last.parts or ()):
                part = types.Part(text="It is at the depot.")
            else:
                asked = last.parts[0].text
                part = types.Part(function_call=types.FunctionCall(
                    name="lookup", args={"q": asked[:20]}))
            yield LlmResponse(content=types.Content(role="model", parts=[part]))

    return Fake(model="fake")


def run_agent(callback: Any, turns: int, static: str | None = None,
              ) -> tuple[Recorder, list[Any]]:
    """``turns`` questions through an agent with ``callback``; what the model got, and the
    contents the session's events hold at the end."""
    recorder = Recorder()

    def probe(context: Any, request: LlmRequest) -> Any:
        recorder.handed.append(list(request.contents))
        return callback(context, request)

    probe.__name__ = "probe"
    agent = LlmAgent(name="tracker", model=fake_model(recorder), instruction=INSTRUCTION,
                     static_instruction=static, tools=[lookup], before_model_callback=probe)
    runner = InMemoryRunner(agent=agent, app_name="app")
    session = asyncio.run(runner.session_service.create_session(app_name="app", user_id="u"))
    for t in range(turns):
        message = types.Content(role="user", parts=[types.Part(text=f"question {t}: " +
                                                               "where is it? " * 15)])
        for _ in runner.run(user_id="u", session_id=session.id, new_message=message):
            pass
    stored = asyncio.run(runner.session_service.get_session(
        app_name="app", user_id="u", session_id=session.id))
    return recorder, [e.content for e in stored.events if e.content is not None]


def responses_paired(contents: list[Any]) -> bool:
    """Every function_response follows an unanswered function_call of its name."""
    pending: dict[str, int] = {}
    for content in contents:
        for part in content.parts or ():
            if part.function_call:
                pending[part.function_call.name] = pending.get(part.function_call.name, 0) + 1
            if part.function_response:
                name = part.function_response.name
                if not pending.get(name):
                    return False
                pending[name] -= 1
    return True


def test_the_model_sees_the_reduced_contents_and_the_session_keeps_everything():
    reports = []
    keep = context_policy_callback(POLICY, on_report=reports.append)
    recorder, stored = run_agent(keep, 30)
    assert len(recorder.requests) == 60 == len(reports)
    assert len(stored) == 30 * 4  # question, call, response, answer: the history is whole
    fired = 0
    for (sent, snapshot, config), handed, result in zip(recorder.requests, recorder.handed,
                                                         reports, strict=True):
        assert responses_paired(sent)  # never a function_response without its call
        # The contents sent are the very objects ADK built, in order, never changed.
        at = [next(i for i, h in enumerate(handed) if h is c) for c in sent]
        assert at == sorted(at) and at[-1] == len(handed) - 1
        assert snapshot == sent
        system = config.system_instruction  # ADK's: the agent's instruction, then its own
        assert system.startswith(INSTRUCTION)
        fragments = {f.id: f for f in result.report.fragments}
        assert fragments["instructions"].chars_after == len(system)
        # The report's figures are what the model got, recounted.
        tools = request_tools(config)
        assert tools is not None and '"lookup"' in tools
        assert result.report.after.chars == (measure_messages(content_dicts(sent)).chars
                                             + len(system) + len(tools))
        assert result.report.after.chars <= TRIGGER + 4_000
        fired += result.report.triggered
    assert 0 < fired < 20  # the stable cut fires only when its kept input passes the trigger
    assert keep.last_cut is not None and keep.last_cut.last_cut is not None


def test_our_markers_are_adks():
    from google.adk.flows.llm_flows.context import _fencing

    assert (INSTRUCTION_BEGIN, INSTRUCTION_END) == (_fencing._INSTRUCTION_BEGIN,
                                                    _fencing._INSTRUCTION_END)


@pytest.mark.parametrize("keep_groups", [0, 1])
@pytest.mark.parametrize("cut", ["stable", "plain"])
def test_an_instruction_adk_puts_among_the_contents_is_protected_and_never_the_question(
        keep_groups, cut):
    # With a static instruction, ADK sends the agent's dynamic instruction as a user content
    # among the turns (before the question, or after the tool's response): it is counted with
    # the system instruction, kept where ADK put it, and the question stays the user's.
    policy = copy.deepcopy(POLICY)
    policy["steps"][0]["keepGroups"] = keep_groups
    reports = []
    keep = context_policy_callback(policy, cut=cut, on_report=reports.append)
    recorder, _ = run_agent(keep, 12, static="You answer in one line.")
    assert len(recorder.requests) == 24 == len(reports)
    trimmed = 0
    for (sent, _, config), handed, result in zip(recorder.requests, recorder.handed, reports,
                                                 strict=True):
        held = [c for c in handed if is_instruction(c)]
        assert len(held) == 1 and INSTRUCTION in held[0].parts[0].text
        assert held[0] in sent  # kept, the very object, in ADK's order with the others
        at = [next(i for i, h in enumerate(handed) if h is c) for c in sent]
        assert at == sorted(at) and at[-1] == len(handed) - 1
        fragments = {f.id: f for f in result.report.fragments}
        assert fragments["instructions"].chars_after == (
            len(config.system_instruction) + 2 + len(held[0].parts[0].text))
        question = [h for h in handed if not is_instruction(h) and h.role == "user"
                    and h.parts[0].text is not None][-1]
        assert question in sent  # the user's own question, never cut
        assert fragments["question"].chars_after == len(question.parts[0].text)
        trimmed += len(sent) < len(handed)
    assert trimmed > 0


def test_the_stable_cut_keeps_the_prefix_the_plain_cut_breaks():
    costs = {}
    for cut in ("stable", "plain"):
        recorder, _ = run_agent(context_policy_callback(POLICY, cut=cut), 24)
        costs[cut] = price_calls([content_dicts(sent) for sent, _, _ in recorder.requests])
    stable, plain = costs["stable"], costs["plain"]
    assert stable.cached_chars / stable.input_chars > 0.75 > plain.cached_chars / plain.input_chars
    assert stable.cost < 0.8 * plain.cost


def test_a_compress_handler_sends_a_new_content_and_leaves_the_session_alone():
    policy = {"mode": "reduce", "triggerChars": 12_000, "steps": [
        {"id": "clear", "kind": "compress", "fragmentId": "history", "targetChars": 6_000,
         "handlerId": "clear-tool-results"}]}
    keep = context_policy_callback(policy, handlers={
        "clear-tool-results": clear_tool_results(keep=1)}, cut="plain")
    recorder, stored = run_agent(keep, 8)
    sent = recorder.requests[-1][0]
    cleared = [c for c in sent if not any(c is h for h in recorder.handed[-1])]
    assert cleared, "the handler changed some contents"
    for content in cleared:
        (part,) = content.parts
        assert part.function_response.name == "lookup"
        assert "scanned at the depot" not in str(part.function_response.response)
    assert responses_paired(sent)
    # The session still holds every tool response as the tool returned it.
    held = [p.function_response.response for c in stored for p in c.parts or ()
            if p.function_response]
    assert len(held) == 8 and all("scanned at the depot" in str(r) for r in held)


def test_an_async_handler_is_awaited_by_adk():
    async def summarise(request):
        return [{"role": "assistant", "content": f"(summary of {len(request.content)} items)"}]

    policy = {"mode": "reduce", "triggerChars": 12_000, "steps": [
        {"id": "sum", "kind": "compress", "fragmentId": "history", "targetChars": 1_000,
         "handlerId": "summarise"}]}
    keep = context_policy_callback(policy, handlers={"summarise": summarise}, cut="plain")
    assert keep.is_async
    recorder, _ = run_agent(keep, 6)
    sent = recorder.requests[-1][0]
    assert sent[0].role == "model" and sent[0].parts[0].text.startswith("(summary of")
    assert keep.last_report.steps[0].status == "applied"


def test_bad_input_gets_a_clear_error():
    with pytest.raises(ContextPolicyError):
        context_policy_callback({**POLICY, "triggerChars": -1})
    with pytest.raises(ContextPolicyError):
        context_policy_callback(POLICY, cut="sometimes")
    keep = context_policy_callback(POLICY)
    with pytest.raises(ContextPlanError) as info:
        keep(None, LlmRequest.model_construct(contents="hello"))
    assert info.value.issues[0].path == "llm_request.contents"
    with pytest.raises(ContextPlanError) as info:
        keep(None, LlmRequest.model_construct(contents=[types.Content(role="user"), 42]))
    assert info.value.issues[0].path == "llm_request.contents[1]"


def test_a_tool_response_counts_its_compact_json_as_every_adapter_does():
    response = {"status": "at the depot", "scans": [1, 2, 3], "where": {"city": "Köln"}}
    content = types.Content(role="user", parts=[types.Part(function_response=types.
                            FunctionResponse(name="lookup", response=response))])
    block = content_dicts([content])[0]["content"][0]
    assert block["content"] == json.dumps(response, ensure_ascii=False, separators=(",", ":"))


def test_a_changed_content_keeps_its_other_parts_and_their_signatures():
    policy = {"mode": "reduce", "triggerChars": 500, "steps": [
        {"id": "clear", "kind": "compress", "fragmentId": "history", "targetChars": 100,
         "handlerId": "clear"}]}
    signature = b"SIGNATURE"
    image = types.Blob(mime_type="image/png", data=b"\x89PNG....")
    contents = []
    for i in range(3):
        contents += [
            types.Content(role="user", parts=[types.Part(text=f"look up {i}")]),
            types.Content(role="model", parts=[
                types.Part(text="thinking...", thought=True, thought_signature=signature),
                types.Part(function_call=types.FunctionCall(name="lookup", args={"q": "x" * 50}),
                           thought_signature=signature)]),
            types.Content(role="user", parts=[
                types.Part(function_response=types.FunctionResponse(
                    name="lookup", response={"r": "depot " * 100})),
                types.Part(inline_data=image)]),
            types.Content(role="model", parts=[types.Part(text=f"answer {i}")])]
    contents.append(types.Content(role="user", parts=[types.Part(text="and now?")]))
    given = copy.deepcopy(contents)
    request = LlmRequest(contents=list(contents))
    keep = context_policy_callback(policy, handlers={
        "clear": clear_tool_results(keep=1, clear_inputs=True)}, cut="plain")
    keep(None, request)
    assert contents == given  # ADK's own contents untouched
    call, result = request.contents[1], request.contents[2]
    assert call is not contents[1] and result is not contents[2]  # both changed
    assert call.parts[0] is contents[1].parts[0]  # the thought, as it was
    assert call.parts[1].thought_signature == signature
    assert call.parts[1].function_call.args != contents[1].parts[1].function_call.args
    assert result.parts[1] is contents[2].parts[1]  # the image, as it was
    assert result.parts[0].function_response.name == "lookup"
    assert "depot" not in str(result.parts[0].function_response.response)
    assert request.contents[-4:] == contents[-4:]  # the newest exchange kept whole
