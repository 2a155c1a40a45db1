"""The LiteLLM adapter: ``apply_policy`` / ``ContextPolicyMessages`` before
``litellm.completion(..., mock_response=...)``, the proxy hook driven by the proxy's own
``ProxyLogging.pre_call_hook``, and the counter backed by ``litellm.token_counter``. What the
"model" receives is recorded by a LiteLLM callback (``log_pre_api_call``). No network: the
cost map is LiteLLM's local copy. Marked ``extras``: CI runs it after installing
``[litellm]``."""

from __future__ import annotations

import asyncio
import copy
import json
import os
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm
import pytest
import tiktoken
from litellm.caching.dual_cache import DualCache
from litellm.integrations.custom_logger import CustomLogger
from litellm.proxy._types import UserAPIKeyAuth
from litellm.proxy.utils import ProxyLogging

from contextpolicy import ContextPlanError, ContextPolicyError
from contextpolicy.accounting import measure_messages
from contextpolicy.adapters.litellm import (
    ContextPolicyMessages,
    LiteLLMCounter,
    apply_policy,
    context_policy_hook,
    litellm_token_counter,
)
from contextpolicy.replay import price_calls
from tests.support.replays import tool_session

pytestmark = [pytest.mark.extras, pytest.mark.usefixtures("pipeline_kernel")]

SYSTEM = {"role": "system", "content": "You are a shipping agent. Use the tools."}
QUESTION = {"role": "user", "content": "And where is parcel 9?"}
TRIGGER, TARGET = 20_000, 10_000
POLICY = {"mode": "reduce", "triggerChars": TRIGGER, "targetInputChars": TARGET, "steps": [
    {"id": "recent", "kind": "trim", "fragmentId": "history", "targetChars": TARGET,
     "keepGroups": 1, "grouping": {"kind": "user-turn"}}]}


class Recorder(CustomLogger):
    """What LiteLLM was about to send, call by call."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[list[dict]] = []

    def log_pre_api_call(self, model, messages, kwargs):
        self.sent.append(copy.deepcopy(messages))


@pytest.fixture
def recorder():
    rec = Recorder()
    before = list(litellm.callbacks)
    litellm.callbacks = [rec]
    try:
        yield rec
    finally:
        litellm.callbacks = before


def _check_pairs(messages: list[dict]) -> None:
    """Every tool result follows the assistant message that called it."""
    called: set[str] = set()
    for m in messages:
        for call in m.get("tool_calls") or ():
            called.add(call["id"])
        if m.get("role") == "tool":
            assert m["tool_call_id"] in called, f"orphan tool result {m['tool_call_id']}"


def test_the_function_before_completion(recorder):
    history = [SYSTEM, *tool_session(12, seed=3), QUESTION]
    given = copy.deepcopy(history)
    kept = apply_policy(history, POLICY)
    assert history == given  # nothing the caller gave changed
    assert kept[0] is history[0] and kept[-1] is history[-1]  # system prompt and question
    assert all(any(m is h for h in history) for m in kept)  # the caller's own objects
    assert len(kept) < len(history)
    # The stable cut holds what a persisted reduction would: cut to the target at an earlier
    # call, grown since, under the trigger; the plain cut cuts this call to the target.
    assert measure_messages(kept).chars <= TRIGGER < measure_messages(history).chars
    plain = apply_policy(history, POLICY, cut="plain")
    assert measure_messages(plain).chars <= TARGET
    _check_pairs(kept)
    _check_pairs(plain)
    response = litellm.completion(model="gpt-4", messages=kept, mock_response="On its way.")
    assert response.choices[0].message.content == "On its way."
    assert recorder.sent == [copy.deepcopy(kept)]


def test_an_agent_loop_keeps_its_prefix_with_the_stable_cut(recorder):
    session = tool_session(30, seed=4)
    inputs = {}
    for cut in ("stable", "plain"):
        keep = ContextPolicyMessages(POLICY, cut=cut)
        history: list = [SYSTEM]
        sent, fired = [], 0
        for m in session:
            history.append(m)
            if m["role"] == "user" or m["role"] == "tool":  # a model call follows
                kept = keep(history)
                sent.append(kept)
                fired += keep.last_report.triggered
                _check_pairs(kept)
                assert measure_messages(kept).chars <= TRIGGER + 4_000  # one call's growth
                response = litellm.completion(model="gpt-4", messages=kept,
                                              mock_response="noted")
                assert response.choices[0].message.content == "noted"
        inputs[cut] = sent
        # The plain cut fires on every call past the trigger; the stable one only when its
        # kept input grows past it again.
        assert 0 < fired < len(sent) - 10 if cut == "stable" else fired > len(sent) / 2
    assert ContextPolicyMessages(POLICY).last_cut is None
    stable, plain = price_calls(inputs["stable"]), price_calls(inputs["plain"])
    assert stable.cached_chars / stable.input_chars > 0.75 > plain.cached_chars / plain.input_chars
    assert stable.cost < 0.8 * plain.cost  # 0.74 measured: a 20,000-char trigger, 3,000 a turn
    # The function afresh on every call gives the memo's result: the stable cut is stateless.
    assert apply_policy([SYSTEM, *session[:-1]], POLICY) == inputs["stable"][-1]


def test_litellm_message_objects_come_back_as_given(recorder):
    history = [SYSTEM, {"role": "user", "content": "Where is parcel 7?"}]
    reply = litellm.completion(model="gpt-4", messages=history,
                               mock_response="It left the depot.").choices[0].message
    history += [reply, {"role": "user", "content": "And parcel 8?"}]
    keep = ContextPolicyMessages(POLICY)
    kept = keep(history)
    assert kept[2] is reply and kept == history
    assert keep.last_cut is not None and keep.last_cut.calls == 2


def test_the_proxy_hook_through_the_proxys_pre_call_hook(recorder):
    seen = []
    hook = context_policy_hook(POLICY, on_report=lambda result, data: seen.append(result))
    litellm.callbacks = [hook, recorder]
    proxy = ProxyLogging(user_api_key_cache=DualCache())
    history = [SYSTEM, *tool_session(12, seed=3), QUESTION]
    data = {"model": "gpt-4", "messages": history}
    given = copy.deepcopy(data)

    async def serve():
        out = await proxy.pre_call_hook(user_api_key_dict=UserAPIKeyAuth(), data=data,
                                        call_type="acompletion")
        response = await litellm.acompletion(**{k: out[k] for k in ("model", "messages")},
                                             mock_response="On its way.")
        embedding = await proxy.pre_call_hook(
            user_api_key_dict=UserAPIKeyAuth(), data={"input": ["x"], "model": "e"},
            call_type="aembedding")
        return out, response, embedding

    out, response, embedding = asyncio.run(serve())
    assert data == given  # the proxy's own dict and messages unchanged
    assert out["messages"] == apply_policy(history, POLICY)
    assert len(out["messages"]) < len(history)
    assert recorder.sent[-1] == copy.deepcopy(out["messages"])
    assert response.choices[0].message.content == "On its way."
    assert embedding["input"] == ["x"]  # not a chat request: passed as it came
    (result,) = seen
    # An earlier call's cut holds (the stable cut replays the calls the history records).
    assert hook.last_report is result.report and result.cut.last_cut is not None


def test_the_counter_says_when_it_is_the_models_own():
    gpt4, gpt4o, claude = (litellm_token_counter(m) for m in (
        "gpt-4", "gpt-4o", "anthropic/claude-sonnet-4-5"))
    assert gpt4.exact and not gpt4o.exact and not claude.exact
    assert gpt4.name == "litellm:gpt-4" and gpt4.tokenizer == "tiktoken:cl100k_base"
    text = "Where is parcel 7? It left the depot at 9:00. 订单退款 😀"
    assert gpt4.count_text(text) == len(tiktoken.get_encoding("cl100k_base").encode(text))
    chat = [SYSTEM, {"role": "user", "content": text}]
    assert gpt4.count_messages(chat) > sum(gpt4.count_text(m["content"]) for m in chat)
    with pytest.raises(ValueError, match="model"):
        LiteLLMCounter("")


def test_a_token_policy_with_the_counter():
    counter = litellm_token_counter("gpt-4")
    policy = {"mode": "reduce", "triggerTokens": 4_000, "targetInputTokens": 2_000, "steps": [
        {"id": "recent", "kind": "trim", "fragmentId": "history", "targetChars": 8_000,
         "keepGroups": 1, "grouping": {"kind": "user-turn"}}]}
    keep = ContextPolicyMessages(policy, counter=counter)
    history = [SYSTEM, *tool_session(12, seed=3), QUESTION]
    kept = keep(history)
    report = keep.last_report
    assert report.triggered and report.counter == "litellm:gpt-4"
    assert report.after.tokens == counter.count_messages(kept) < report.before.tokens


def test_bad_input_gets_a_clear_error():
    with pytest.raises(ContextPolicyError):
        ContextPolicyMessages({**POLICY, "triggerChars": -1})
    with pytest.raises(ContextPolicyError, match="expected 'stable' or 'plain'"):
        ContextPolicyMessages(POLICY, cut="sometimes")
    with pytest.raises(ContextPolicyError):
        context_policy_hook({"mode": "audit"})
    keep = ContextPolicyMessages(POLICY)
    with pytest.raises(ContextPlanError) as info:
        keep("hello")
    assert info.value.issues[0].path == "messages"
    with pytest.raises(ContextPlanError) as info:
        keep([SYSTEM, 42])
    assert info.value.issues[0].path.startswith("messages[1]")
    async def shorter(request: Any) -> Any:
        return request.content

    waited = ContextPolicyMessages({**POLICY, "steps": [
        {"id": "c", "kind": "compress", "fragmentId": "history", "handlerId": "mine",
         "targetChars": 10}]}, handlers={"mine": shorter})
    with pytest.raises(ContextPolicyError, match=r"handler 'mine' is a coroutine function: "
                                                 r"await this object's areduce"):
        waited([SYSTEM])
    assert asyncio.run(waited.areduce([SYSTEM])) == [SYSTEM]
    for tools in ("nope", {"type": "function"}, 7):
        with pytest.raises(TypeError, match="tools: expected a list of tool schemas"):
            keep([SYSTEM], tools=tools)


TRACK = {"type": "function", "function": {
    "name": "track", "description": "Where a parcel is.",
    "parameters": {"type": "object", "properties": {"parcel": {"type": "integer"}}}}}


def test_the_tools_schemas_count_and_are_never_sent_as_a_message():
    history = [SYSTEM, *tool_session(3, seed=3), QUESTION]
    keep = ContextPolicyMessages(POLICY)
    kept = keep(history, tools=[TRACK])
    assert kept == history  # under the trigger: every message, and nothing else
    report = keep.last_report
    text = json.dumps([TRACK], ensure_ascii=False, separators=(",", ":"))
    tools = {f.id: f for f in report.fragments}["tools"]
    assert tools.chars_before == tools.chars_after == len(text)
    assert report.before.chars == measure_messages(history).chars + len(text)
    # A schema big enough pushes the input past the trigger: the history is cut for it.
    big = {**TRACK, "function": {**TRACK["function"], "description": "x" * TRIGGER}}
    assert len(keep(history, tools=[big])) < len(history)
    assert keep(history, tools=[big])[0] is SYSTEM


def test_the_proxy_hook_counts_the_requests_tools():
    hook = context_policy_hook(POLICY)
    history = [SYSTEM, *tool_session(3, seed=3), QUESTION]
    big = {**TRACK, "function": {**TRACK["function"], "description": "x" * TRIGGER}}
    out = asyncio.run(hook.async_pre_call_hook(
        UserAPIKeyAuth(), None, {"model": "gpt-4", "messages": history, "tools": [big]},
        "acompletion"))
    assert len(out["messages"]) < len(history) and out["tools"] == [big]
    assert {f.id for f in hook.last_report.fragments} >= {"tools", "system", "history"}
