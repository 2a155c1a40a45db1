"""The Pydantic AI adapter: ``ContextPolicyProcessor`` under ``ProcessHistory`` (persist) and
``ContextPolicyCapability`` (ephemeral, stable and plain cuts) inside real ``Agent`` runs.

The model is a ``FunctionModel`` that records what it receives (a deep copy too) and calls the
``lookup`` tool (about 3,000 chars a result) on the first request of every turn, answering after
its return; a conversation is 30 runs, each given the history the last one ended with. No
network. Marked ``extras``: the main suite deselects it; CI runs it with ``pytest -m extras``
after installing ``[pydantic-ai]``. Each test runs on both kernels.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import subprocess
import sys
import threading
import warnings
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic_ai import Agent, RunContext
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import (
    CachePoint,
    ImageUrl,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    RetryInfo,
    RetryPromptPart,
    SystemPromptPart,
    TextContent,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from contextpolicy import (
    ContextCancelledError,
    ContextPlanError,
    ContextPolicyError,
    check_input_budget,
)
from contextpolicy.adapters.pydantic_ai import (
    ContextPolicyCapability,
    ContextPolicyProcessor,
    to_chat_dicts,
)
from contextpolicy.handlers import clear_tool_results, registry

pytestmark = [pytest.mark.extras, pytest.mark.usefixtures("pipeline_kernel")]

INSTRUCTIONS = "Answer from the lookup tool, briefly."
SYSTEM = "You are the parcel desk."
TURNS = 30
TRIGGER, TARGET = 20_000, 12_000
TRIM = {"mode": "reduce", "triggerChars": TRIGGER, "targetInputChars": TARGET, "steps": [{
    "id": "trim", "kind": "trim", "fragmentId": "history", "field": "messages",
    "grouping": {"kind": "user-turn"}, "keepGroups": 1, "targetChars": 8_000}]}


# ---------------------------------------------------------------------------------------------
# The model, the agent, and an independent count of what a model was sent.


@dataclass
class Call:
    messages: list[Any]  # the list the model received
    snapshot: list[Any]  # a deep copy, taken on receipt
    instructions: str | None
    tools: str | None  # the tools it was offered, as the provider is told them


def offered(info: AgentInfo) -> str | None:
    """The tools of a request as one compact JSON array (name, description, parameters)."""
    tools = [*info.function_tools, *info.output_tools]
    return json.dumps([{"type": "function", "name": t.name, "description": t.description,
                        "parameters": t.parameters_json_schema} for t in tools],
                      ensure_ascii=False, separators=(",", ":")) if tools else None


class Recorder:
    """A ``FunctionModel`` function: calls ``lookup`` when the last request holds a user
    prompt, answers otherwise; call ids are numbered, so two conversations match."""

    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.ids = itertools.count()

    def __call__(self, messages: list[Any], info: AgentInfo) -> ModelResponse:
        self.calls.append(Call(messages, copy.deepcopy(messages), info.instructions,
                               offered(info)))
        n = next(self.ids)
        if any(isinstance(p, UserPromptPart) for p in messages[-1].parts):
            return ModelResponse(parts=[
                ThinkingPart(f"look it up {n}"),
                ToolCallPart("lookup", {"q": f"q{n}"}, tool_call_id=f"call_{n}")])
        return ModelResponse(parts=[TextPart(f"answer {n}: " + "a" * 60)])


def lookup(q: str) -> str:
    """Look ``q`` up."""
    return f"result for {q}: " + "r" * 3_000


def make_agent(recorder: Recorder, capability: Any = None) -> Agent[None, str]:
    return Agent(FunctionModel(recorder), instructions=INSTRUCTIONS, system_prompt=SYSTEM,
                 tools=[lookup], capabilities=[capability] if capability is not None else [])


def question(t: int) -> str:
    return f"question {t}: where is parcel P-{t}? " + "q" * 40


def converse(agent: Agent[None, str], turns: int = TURNS, use_async: bool = False,
             history: list[Any] | None = None) -> tuple[list[Any], list[tuple[list[Any], Any]]]:
    """``turns`` runs, each given the last one's history; the final history, and each run's
    given history with a deep copy taken before the run."""
    history = list(history or [])
    given = []
    for t in range(turns):
        given.append((history, copy.deepcopy(history)))
        if use_async:
            result = asyncio.run(agent.run(question(t), message_history=history))
        else:
            result = agent.run_sync(question(t), message_history=history)
        history = result.all_messages()
    return history, given


def part_chars(part: Any) -> tuple[int, int]:
    """(chars, messages) of one part, counted here from the parts' own fields."""
    if isinstance(part, (SystemPromptPart, TextPart, ThinkingPart)):
        return len(part.content), 0
    if isinstance(part, UserPromptPart):
        return (len(part.content) if isinstance(part.content, str)
                else sum(len(x) for x in part.content if isinstance(x, str))), 1
    if isinstance(part, ToolReturnPart):
        assert isinstance(part.content, str)
        return len(part.content), 1
    if isinstance(part, ToolCallPart):
        return len(part.tool_name) + len(json.dumps(part.args, separators=(",", ":"))), 0
    raise AssertionError(f"a part this test does not send: {part!r}")


def recount(messages: list[Any], instructions: str | None,
            tools: str | None = None) -> tuple[int, int]:
    """(chars, messages) of what a model was sent: the instructions, the tools, every part's
    text; one message per part of a request and per response (the adapter's own rule)."""
    chars, count = 0, 0
    for text in (instructions, tools):
        if text is not None:
            chars, count = chars + len(text), count + 1
    for message in messages:
        if isinstance(message, ModelResponse):
            count += 1
        elif not message.parts:
            count += 1
        for part in message.parts:
            c, _ = part_chars(part)
            chars += c
            count += isinstance(message, ModelRequest)
    return chars, count


def assert_paired(messages: list[Any]) -> None:
    """Every tool return answers a call made earlier, every call is answered, nothing the
    framework had to repair (it synthesizes returns for dangling calls)."""
    called: list[str] = []
    returned: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                called.append(part.tool_call_id)
            elif isinstance(part, ToolReturnPart):
                assert part.tool_call_id in called, f"orphan return {part.tool_call_id}"
                assert not (part.metadata or {}).get("pydantic_ai_synthesized_tool_return")
                returned.append(part.tool_call_id)
    assert sorted(called) == sorted(returned)


def projection(messages: list[Any]) -> list[tuple[Any, ...]]:
    """What a model reads of ``messages`` (no timestamps, run ids or usage)."""
    out = []
    for m in messages:
        out.append((m.kind, tuple((p.part_kind, getattr(p, "content", None),
                                   getattr(p, "tool_call_id", None)) for p in m.parts)))
    return out


class Spy:
    """A processor wrapped to keep what it returned (before Pydantic AI repairs anything)."""

    def __init__(self, inner: ContextPolicyProcessor) -> None:
        self.inner = inner
        self.returned: list[list[Any]] = []

    def __call__(self, ctx: RunContext[None], messages: list[Any]) -> list[Any]:
        out = self.inner(ctx, messages)
        self.returned.append(out)
        return out


class SpyCapability(ContextPolicyCapability):
    returned: list[list[Any]]

    async def before_model_request(self, ctx: Any, request_context: Any) -> Any:
        out = await super().before_model_request(ctx, request_context)
        self.__dict__.setdefault("returned", []).append(list(out.messages))
        return out


# ---------------------------------------------------------------------------------------------
# Persist: the processor under ProcessHistory.


@pytest.mark.parametrize("use_async", [False, True], ids=["run_sync", "run"])
def test_persist_the_model_gets_the_reduced_history_and_the_run_keeps_it(use_async):
    reports: list[Any] = []
    spy = Spy(ContextPolicyProcessor(TRIM, on_report=reports.append))
    recorder = Recorder()
    history, given = converse(make_agent(recorder, ProcessHistory(spy)), use_async=use_async)

    assert len(recorder.calls) == len(reports) == len(spy.returned) == 2 * TURNS
    full, _ = converse(make_agent(Recorder()))  # the same conversation, no policy
    full_chars = recount(full, INSTRUCTIONS)[0]
    assert full_chars > 4 * TRIGGER
    system_part = recorder.calls[0].messages[0].parts[0]
    asked_before: Any = None
    for n, (call, report, returned) in enumerate(zip(recorder.calls, reports, spy.returned)):
        t = n // 2
        assert call.instructions == INSTRUCTIONS
        assert call.tools is not None and '"name":"lookup"' in call.tools
        assert (report.after.chars, report.after.messages) == recount(
            call.messages, call.instructions, call.tools)
        assert report.after.chars <= TRIGGER
        if report.triggered:
            assert report.target_reached and report.after.chars <= TARGET < report.before.chars
        assert_paired(returned)
        assert_paired(call.messages)
        assert call.messages[0].parts[0] is system_part and system_part.content == SYSTEM
        asked = [p for m in call.messages for p in m.parts if isinstance(p, UserPromptPart)]
        assert asked[-1].content == question(t)
        if n % 2:  # the turn's second call: the same question object, its tool return after it
            assert asked[-1] is asked_before
            assert isinstance(call.messages[-1].parts[0], ToolReturnPart)
        asked_before = asked[-1]
    assert sum(r.triggered for r in reports) >= 5
    # Persisted: the run's history is what the last call was sent, and the answer.
    assert history[:-1] == recorder.calls[-1].messages and len(history) < len(full) / 3
    for passed, snapshot in given:  # the caller's history is never changed
        assert passed == snapshot


def test_persist_keeps_what_was_not_cut_as_the_same_objects():
    processor = ContextPolicyProcessor(TRIM)
    history, _ = converse(make_agent(Recorder()), turns=12)
    kept = processor(history[:-1])  # the last answer is no request
    assert processor.last_report.triggered
    assert len(kept) < len(history) - 1
    originals = {id(m) for m in history}
    rebuilt = [m for m in kept if id(m) not in originals]
    # Only the first request is rebuilt: its system prompt stays, its question went.
    assert len(rebuilt) == 1 and rebuilt[0].parts == [history[0].parts[0]]
    assert rebuilt[0].parts[0] is history[0].parts[0]
    assert rebuilt[0].instructions == history[0].instructions
    assert kept[1:] == history[len(history) - len(kept):-1]
    assert all(a is b for a, b in zip(kept[1:], history[len(history) - len(kept):-1]))


# ---------------------------------------------------------------------------------------------
# Ephemeral: the capability.


@pytest.mark.parametrize("use_async", [False, True], ids=["run_sync", "run"])
@pytest.mark.parametrize("cut", ["stable", "plain"])
def test_ephemeral_the_model_gets_the_reduced_history_and_the_run_keeps_all(cut, use_async):
    reports: list[Any] = []
    capability = SpyCapability(TRIM, cut=cut, on_report=reports.append)
    recorder = Recorder()
    history, given = converse(make_agent(recorder, capability), use_async=use_async)

    assert len(recorder.calls) == len(reports) == 2 * TURNS
    assert len(history) == 4 * TURNS  # nothing was removed from the run
    in_history = {id(m) for m in history} | {id(p) for m in history for p in m.parts}
    for n, (call, report, returned) in enumerate(zip(recorder.calls, reports,
                                                     capability.returned)):
        assert call.tools is not None and '"name":"lookup"' in call.tools
        assert (report.after.chars, report.after.messages) == recount(
            call.messages, call.instructions, call.tools)
        assert report.after.chars <= TRIGGER
        assert_paired(returned)
        assert_paired(call.messages)
        assert call.messages[0].parts[0].content == SYSTEM
        assert call.messages[0].parts[0] is history[0].parts[0]
        asked = [p for m in call.messages for p in m.parts if isinstance(p, UserPromptPart)]
        assert asked[-1].content == question(n // 2)
        # The history's own objects: a message, or a request rebuilt from its parts.
        for message in call.messages:
            assert id(message) in in_history or all(id(p) in in_history for p in message.parts)
    late = recorder.calls[-1]
    assert len(late.messages) < len(history) / 3
    assert recount(late.messages, INSTRUCTIONS)[0] < recount(history, INSTRUCTIONS)[0] / 4
    assert capability.last_report is reports[-1]
    assert (capability.last_cut is not None) == (cut == "stable")
    for passed, snapshot in given:
        assert passed == snapshot


def test_the_stable_cut_sends_what_persisting_would_and_keeps_the_prefix():
    persist, stable, plain = Recorder(), Recorder(), Recorder()
    persisted: list[Any] = []
    stabled: list[Any] = []
    converse(make_agent(persist, ProcessHistory(ContextPolicyProcessor(
        TRIM, on_report=persisted.append))))
    converse(make_agent(stable, ContextPolicyCapability(TRIM, on_report=stabled.append)))
    converse(make_agent(plain, ContextPolicyCapability(TRIM, cut="plain")))
    assert ([projection(c.messages) for c in stable.calls]
            == [projection(c.messages) for c in persist.calls])
    # The same figures: the processor, handed the RunContext, counts the same tools.
    assert [r.after.chars for r in stabled] == [r.after.chars for r in persisted]
    assert all(r.after.fragments == 6 for r in persisted[1:])  # instructions, tools, ...

    def prefix_breaks(recorder: Recorder) -> int:
        views = [projection(c.messages) for c in recorder.calls]
        return sum(1 for a, b in itertools.pairwise(views) if b[:len(a)] != a)

    assert prefix_breaks(stable) < prefix_breaks(plain) / 2
    assert prefix_breaks(plain) >= TURNS - 10


# ---------------------------------------------------------------------------------------------
# Messages as dicts, and the way back.


def rich_history() -> list[Any]:
    with warnings.catch_warnings():  # RetryPromptPart is deprecated, and still in histories
        warnings.simplefilter("ignore")
        retry = RetryPromptPart("bad args", tool_name="a", tool_call_id="c3")
    return [
        ModelRequest(parts=[SystemPromptPart("sys"), UserPromptPart(
            ["look at ", ImageUrl("https://example.com/a.png"), CachePoint(), "this"])],
            instructions="be kind"),
        ModelResponse(parts=[ThinkingPart("hm"), TextPart("ok"),
                             ToolCallPart("a", '{"x": 1}', tool_call_id="c1"),
                             ToolCallPart("b", {"y": "é"}, tool_call_id="c2")]),
        ModelRequest(parts=[ToolReturnPart("a", {"v": [1, 2]}, "c1"),
                            ToolReturnPart("b", "boom", "c2", outcome="failed")]),
        ModelResponse(parts=[ToolCallPart("a", {}, tool_call_id="c3")]),
        ModelRequest(parts=[retry]),
        ModelResponse(parts=[TextPart("nope")]),
        ModelRequest(parts=[RetryFeedbackPart(
            "say it plainly", retry=RetryInfo(cause="model_retry", attempt=1, max_retries=1))]),
    ]


def test_a_request_is_one_dict_per_part_and_a_response_one_dict():
    dicts = to_chat_dicts(rich_history())
    assert dicts == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "look at "},
                                     {"type": "pydantic-ai-image-url"},
                                     {"type": "text", "text": "this"}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"},
                                          {"type": "text", "text": "ok"}],
         "tool_calls": [
             {"id": "c1", "type": "function", "function": {"name": "a", "arguments": '{"x":1}'}},
             {"id": "c2", "type": "function", "function": {"name": "b", "arguments": '{"y":"é"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": '{"v":[1,2]}'},
        {"role": "tool", "tool_call_id": "c2", "content": "boom"},
        {"role": "assistant", "content": [], "tool_calls": [
            {"id": "c3", "type": "function", "function": {"name": "a", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c3", "content": "bad args"},
        {"role": "assistant", "content": [{"type": "text", "text": "nope"}]},
        {"role": "system", "content": "say it plainly"},
    ]
    usage = check_input_budget(dicts)
    # sys, look at, this, hm, ok, a{"x":1}, b{"y":"é"}, {"v":[1,2]}, boom, a{}, bad args, nope, ...
    assert usage.chars == 3 + 8 + 4 + 2 + 2 + 8 + 10 + 11 + 4 + 3 + 8 + 4 + 14
    assert usage.opaque_parts == 1


def test_a_retry_feedback_is_never_the_question():
    history = [
        ModelRequest(parts=[UserPromptPart("first question")]),
        ModelResponse(parts=[TextPart("first answer")]),
        ModelRequest(parts=[UserPromptPart("second question")]),
        ModelResponse(parts=[TextPart("not what was asked")]),
        ModelRequest(parts=[RetryFeedbackPart(
            "answer the question", retry=RetryInfo(cause="model_retry", attempt=1,
                                                   max_retries=1))]),
    ]
    everything = {"mode": "reduce", "triggerChars": 1, "steps": [{
        "id": "all", "kind": "trim", "fragmentId": "history", "keepGroups": 0,
        "targetChars": 0}]}
    processor = ContextPolicyProcessor(everything)
    assert processor(history) == history[2:]
    assert all(a is b for a, b in zip(processor(history), history[2:]))
    assert [s.messages_removed for s in processor.last_report.steps] == [2]


def test_a_compress_handler_change_is_a_copy_and_the_callers_messages_stay():
    history, _ = converse(make_agent(Recorder()), turns=4)
    before = copy.deepcopy(history)
    clear = {"mode": "reduce", "triggerChars": 1, "steps": [{
        "id": "clear", "kind": "compress", "fragmentId": "history",
        "handlerId": "clear-tool-results", "targetChars": 0}]}
    processor = ContextPolicyProcessor(clear, handlers=registry(clear_tool_results(keep=1)))
    kept = processor(history[:-1])
    assert history == before  # nothing given was changed
    assert len(kept) == len(history) - 1
    changed = [i for i, (a, b) in enumerate(zip(kept, history)) if a is not b]
    assert changed == [2, 6]  # the first two turns' tool returns (the third is kept as is)
    for i in changed:
        part = kept[i].parts[0]
        assert isinstance(part, ToolReturnPart) and part is not history[i].parts[0]
        assert part.tool_call_id == history[i].parts[0].tool_call_id
        assert len(part.content) < 100 < len(history[i].parts[0].content)
        assert kept[i].instructions == history[i].instructions
    report = processor.last_report
    assert (report.after.chars, report.after.messages) == recount(kept, INSTRUCTIONS)
    assert report.before.chars - report.after.chars == sum(
        len(history[i].parts[0].content) - len(kept[i].parts[0].content) for i in changed)


def test_a_handler_text_change_drops_the_provider_id_of_a_response_part():
    history = [
        ModelRequest(parts=[UserPromptPart("old question")]),
        ModelResponse(parts=[TextPart("x" * 500, id="msg_1", provider_name="openai")]),
        ModelRequest(parts=[UserPromptPart("new question")]),
    ]
    truncate = {"mode": "reduce", "triggerChars": 1, "steps": [{
        "id": "cut", "kind": "compress", "fragmentId": "history",
        "handlerId": "truncate-messages", "targetChars": 0}]}
    from contextpolicy.handlers import truncate_messages

    processor = ContextPolicyProcessor(truncate, handlers=registry(truncate_messages(
        max_chars=100)))
    kept = processor(history)
    assert kept[0] is history[0] and kept[2] is history[2]
    part = kept[1].parts[0]
    assert len(part.content) < 200 and part.id is None and history[1].parts[0].id == "msg_1"


def test_a_summary_becomes_a_new_message_marked_in_its_metadata():
    history, _ = converse(make_agent(Recorder()), turns=3)
    summarise = {"mode": "reduce", "triggerChars": 1, "steps": [{
        "id": "sum", "kind": "compress", "fragmentId": "history",
        "handlerId": "summarize", "targetChars": 200}]}
    from contextpolicy.handlers import summarize

    processor = ContextPolicyProcessor(summarise, handlers=registry(summarize(
        lambda text, target: "the parcels are fine")))
    kept = processor(history[:-1])
    new = [m for m in kept if not any(m is h for h in history)]
    summary = [m for m in new if any(isinstance(p, UserPromptPart) and "fine" in p.content
                                     for p in m.parts)]
    assert len(summary) == 1 and summary[0].metadata["contextpolicy"]["kind"] == "summary"
    assert kept[-1] is history[-2]


def test_a_policy_that_leaves_no_request_at_the_end_is_a_clear_error():
    history = [
        ModelRequest(parts=[UserPromptPart("q")]),
        ModelResponse(parts=[ToolCallPart("a", {}, tool_call_id="c1")]),
        ModelRequest(parts=[ToolReturnPart("a", "r" * 50, "c1")]),
    ]

    def to_an_answer(request: Any) -> list[dict[str, Any]]:
        return [{"role": "assistant", "content": "done"}]

    policy = {"mode": "reduce", "triggerChars": 1, "steps": [{
        "id": "turn", "kind": "compress", "fragmentId": "turn", "handlerId": "answer",
        "targetChars": 0}]}
    processor = ContextPolicyProcessor(policy, handlers={"answer": to_an_answer})
    with pytest.raises(ContextPlanError) as info:
        processor(history)
    assert info.value.codes == ["unsupported-message"] and "ModelRequest" in str(info.value)
    # Resuming a response the provider paused, Pydantic AI sends the history ending with it.
    paused = [*history, ModelResponse(parts=[TextPart("half")], state="suspended")]
    kept = ContextPolicyProcessor(TRIM)(paused)
    assert len(kept) == 4 and all(a is b for a, b in zip(kept, paused))


def test_a_message_that_is_not_a_pydantic_ai_message_is_a_plan_error_naming_it():
    processor = ContextPolicyProcessor({"mode": "validate"})
    with pytest.raises(ContextPlanError) as info:
        processor([ModelRequest(parts=[UserPromptPart("q")]), {"role": "user", "content": "x"}])
    assert info.value.issues[0].path == "messages[1]"
    assert "ModelRequest or ModelResponse" in str(info.value)
    unsendable = ModelResponse(parts=[ToolCallPart("a", {"x": object()}, tool_call_id="c")])
    with pytest.raises(ContextPlanError, match="cannot be read as a model is sent it") as info:
        processor([ModelRequest(parts=[UserPromptPart("q")]), unsendable])
    assert info.value.issues[0].path == "messages[1]"
    for bad in ("not messages", 5, (m for m in [ModelRequest(parts=[UserPromptPart("q")])])):
        with pytest.raises(ContextPlanError, match="expected a list of Pydantic AI messages"):
            processor(bad)
        with pytest.raises(ContextPlanError, match="expected a list of Pydantic AI messages"):
            asyncio.run(processor.areduce(bad))
    with pytest.raises(TypeError, match="RunContext and the messages; got a list"):
        processor([], [])


@pytest.mark.parametrize("front", ["processor", "capability"])
def test_a_part_the_kernel_cannot_read_is_named_by_its_message_and_part(front):
    bad = [ModelRequest(parts=[SystemPromptPart("s"), UserPromptPart("q")]),
           ModelResponse(parts=[TextPart("a")]),
           ModelRequest(parts=[SystemPromptPart("x"), UserPromptPart([TextContent(123)])])]
    recorder = Recorder()
    with pytest.raises(ContextPlanError) as info:
        if front == "processor":
            ContextPolicyProcessor({"mode": "validate"})(bad)
        else:
            make_agent(recorder, ContextPolicyCapability({"mode": "validate"})).run_sync(
                "hello", message_history=bad)
    where = "messages" if front == "processor" else "request_context.messages"
    assert info.value.issues[0].path == f"{where}[2].parts[1].content[0].text"
    assert recorder.calls == []


def test_nothing_to_do_returns_the_same_objects():
    history, _ = converse(make_agent(Recorder()), turns=2)
    processor = ContextPolicyProcessor(TRIM)
    kept = processor(history[:-1])
    assert not processor.last_report.triggered
    assert len(kept) == len(history) - 1 and all(a is b for a, b in zip(kept, history))


# ---------------------------------------------------------------------------------------------
# Policies, handlers, context and events.


@pytest.mark.parametrize("policy,kwargs,code", [
    ({"mode": "reduce", "triggerChar": 5, "steps": []}, {}, "unknown-key"),
    ({**TRIM, "steps": [{**TRIM["steps"][0], "fragmentId": "question"}]}, {},
     "protected-fragment"),
    ({"mode": "reduce", "triggerTokens": 10, "steps": TRIM["steps"]}, {}, "tokens-without-counter"),
    ({"mode": "audit", "mutableFragmentIds": ["history"]}, {}, "unsupported-mode"),
    ({**TRIM, "steps": [{"id": "c", "kind": "compress", "fragmentId": "history",
                         "handlerId": "nope", "targetChars": 0}]}, {}, "unknown-handler"),
    ({"mode": "validate"}, {"handlers": {"h": lambda r: r.content}, "counter": len},
     "invalid-option"),
], ids=["typo", "question", "tokens", "audit", "handler", "beside-prepared"])
@pytest.mark.parametrize("front", [ContextPolicyProcessor, ContextPolicyCapability])
def test_a_bad_policy_is_a_policy_error_before_any_model_call(front, policy, kwargs, code):
    if code == "invalid-option":  # handlers and a counter beside a policy that carries its own
        from contextpolicy import prepare_policy

        policy = prepare_policy(policy)
    recorder = Recorder()
    with pytest.raises(ContextPolicyError) as info:
        make_agent(recorder, front(policy, **kwargs)).run_sync("hello")
    assert code in info.value.codes
    assert recorder.calls == []


def test_a_cut_that_is_not_one_is_a_policy_error():
    with pytest.raises(ContextPolicyError) as info:
        ContextPolicyCapability(TRIM, cut="fast")
    assert info.value.codes == ["invalid-option"] and info.value.issues[0].path == "cut"
    with pytest.raises(TypeError):  # a persisted reduction is stable by itself: no cut
        ContextPolicyProcessor(TRIM, cut="stable")  # type: ignore[call-arg]


def test_an_async_handler_under_the_sync_processor_is_awaited_by_pydantic_ai():
    async def shorten(request: Any) -> Any:
        await asyncio.sleep(0)
        return [dict(m, content="(cleared)") if m.get("role") == "tool" else m
                for m in request.content]

    policy = {"mode": "reduce", "triggerChars": 5_000, "steps": [{
        "id": "short", "kind": "compress", "fragmentId": "history", "handlerId": "short",
        "targetChars": 0}]}
    processor = ContextPolicyProcessor(policy, handlers={"short": shorten})
    assert processor.is_async
    recorder = Recorder()
    converse(make_agent(recorder, ProcessHistory(processor)), turns=4)
    last = recorder.calls[-1].messages
    returns = [p.content for m in last for p in m.parts if isinstance(p, ToolReturnPart)]
    assert returns[:-1] == ["(cleared)"] * 3 and returns[-1].startswith("result for")
    assert asyncio.run(processor.areduce(last)) == last


def test_the_processor_takes_a_run_context_and_its_async_variant_runs_on_the_loop():
    reports: list[Any] = []
    processor = ContextPolicyProcessor(TRIM, on_report=reports.append)
    seen: list[Any] = []

    def with_context(ctx: RunContext[None], messages: list[Any]) -> list[Any]:
        seen.append(ctx)
        return processor(ctx, messages)

    first, second = Recorder(), Recorder()
    converse(make_agent(first, ProcessHistory(with_context)), turns=10)
    converse(make_agent(second, ProcessHistory(processor.areduce)), turns=10)
    assert len(seen) == 20 and all(isinstance(c, RunContext) for c in seen)
    assert len(reports) == 40 and sum(r.triggered for r in reports) >= 2
    assert ([projection(c.messages) for c in first.calls]
            == [projection(c.messages) for c in second.calls])


def test_events_and_cancel():
    events: list[str] = []
    capability = ContextPolicyCapability(TRIM, on_event=lambda e: events.append(e.type))
    make_agent(Recorder(), capability).run_sync("hello")
    assert events[0] == "context.started" and events[-1] == "context.completed"
    stop = threading.Event()
    stop.set()
    recorder = Recorder()
    with pytest.raises(ContextCancelledError):
        make_agent(recorder, ProcessHistory(ContextPolicyProcessor(TRIM, cancel=stop))).run_sync(
            "hello")
    assert recorder.calls == []


def test_import_contextpolicy_never_imports_pydantic_ai():
    code = (
        "import sys, contextpolicy, contextpolicy.adapters\n"
        "print(any(m.split('.')[0] == 'pydantic_ai' for m in sys.modules))\n"
        "import contextpolicy.adapters.pydantic_ai\n"
        "print('pydantic_ai' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    assert out[:2] == ["False", "True"]


def test_without_the_extra_the_import_error_names_it():
    code = (
        "import sys\n"
        "sys.modules['pydantic_ai'] = None\n"
        "try:\n"
        "    import contextpolicy.adapters.pydantic_ai\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "pip install 'contextpolicy[pydantic-ai]'" in out
