"""LiteLLM feeds a usage-anchored counter: ``ContextPolicyMessages.record(response)`` after
``litellm.completion``, and the proxy hook's ``async_post_call_success_hook`` after the proxy's
own ``ProxyLogging.pre_call_hook``.

The "provider" is ``mock_response``: a ``ModelResponse`` whose ``usage.prompt_tokens`` is its
own "tokenizer" over the messages it was sent (3 a message plus the words of its JSON) plus
``HIDDEN`` tokens of framing no local counter sees. No network: LiteLLM's local cost map.
"""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm
import pytest
from litellm.caching.dual_cache import DualCache
from litellm.proxy._types import UserAPIKeyAuth
from litellm.proxy.utils import ProxyLogging

from contextpolicy.adapters.litellm import ContextPolicyMessages, context_policy_hook
from contextpolicy.counters import usage_anchored
from tests.support.usage_replay import FramedCounter

pytestmark = [pytest.mark.extras, pytest.mark.usefixtures("pipeline_kernel")]

SYSTEM = {"role": "system", "content": "You are a shipping agent."}
HIDDEN = 11


def framed(messages: list[dict]) -> int:
    """3 tokens a message plus the words of its JSON."""
    return sum(3 + len(json.dumps(m, sort_keys=True).split()) for m in messages)


def local_words() -> FramedCounter:
    """The local counter: ``framed``, the provider's tokenizer without its overhead."""
    return FramedCounter(framed)


def provider_words() -> FramedCounter:
    """The provider's own count: ``framed`` plus ``HIDDEN``."""
    return FramedCounter(framed, HIDDEN)


def answer(messages: list[dict], n: int) -> litellm.ModelResponse:
    """The provider's response to ``messages``, with its usage."""
    tokens = provider_words().count_messages(messages)
    return litellm.ModelResponse(
        choices=[{"message": {"role": "assistant", "content": f"parcel {n} is in transit"}}],
        usage={"prompt_tokens": tokens, "completion_tokens": 4, "total_tokens": tokens + 4})


def policy(trigger: int = 10**6) -> dict:
    return {"mode": "reduce", "triggerTokens": trigger, "steps": [{
        "id": "trim", "kind": "trim", "fragmentId": "history", "keepGroups": 1,
        "targetChars": 0, "grouping": {"kind": "user-turn"}}]}


def chat(keep: ContextPolicyMessages, calls: int = 4) -> tuple[list[list[dict]], list[int], list]:
    """An agent loop of ``calls`` completions: what each sent, what it reported, the reports."""
    history, sent, reported, reports = [SYSTEM], [], [], []
    for n in range(calls):
        history.append({"role": "user", "content": f"where is parcel {n} now"})
        kept = keep(history)
        reports.append(keep.last_report)
        response = litellm.completion(model="gpt-4", messages=kept, mock_response=answer(kept, n))
        keep.record(response)
        sent.append(kept)
        reported.append(response.usage.prompt_tokens)
        history.append({"role": "assistant", "content": response.choices[0].message.content})
    return sent, reported, reports


def test_record_counts_the_next_call_from_the_reported_prompt_tokens():
    sent, reported, reports = chat(ContextPolicyMessages(
        policy(), counter=usage_anchored(local_words())))
    assert reports[0].before.tokens_reported is None
    assert reports[0].before.tokens == reported[0] - HIDDEN
    for k in range(1, 4):
        before, added = reports[k].before, sent[k][len(sent[k - 1]):]
        assert before.tokens_reported == reported[k - 1]
        assert before.tokens == reported[k - 1] + framed(added) == reported[k]


def test_nothing_is_recorded_without_an_anchored_counter():
    keep = ContextPolicyMessages(policy(), counter=local_words())
    _, reported, reports = chat(keep)
    assert [r.before.tokens_reported for r in reports] == [None] * 4
    assert [r.before.tokens for r in reports] == [c - HIDDEN for c in reported]
    assert keep.record(answer([SYSTEM], 0)) is False


def words(text: str) -> int:
    return len(text.split())


def test_a_token_trigger_fires_where_the_providers_count_passes_it():
    counts = chat(ContextPolicyMessages(policy(), counter=provider_words()))[1]
    assert counts[1] + 2 < counts[2]
    trigger = counts[1] + 1
    expected = next(k for k, c in enumerate(counts) if c > trigger)

    def fired(counter: Any) -> int | None:
        reports = chat(ContextPolicyMessages(policy(trigger), counter=counter))[2]
        return next((k for k, r in enumerate(reports) if r.triggered), None)

    assert fired(provider_words()) == fired(usage_anchored(words)) == expected == 2
    assert fired(words) != expected  # words alone miss the framing: later, if ever


def test_the_proxy_records_each_response_for_its_request():
    reports: list = []
    hook = context_policy_hook(policy(), counter=usage_anchored(local_words()),
                               on_report=lambda result, data: reports.append(result.report))
    before = list(litellm.callbacks)
    litellm.callbacks = [hook]
    proxy, key = ProxyLogging(user_api_key_cache=DualCache()), UserAPIKeyAuth()
    history, reported = [SYSTEM], []

    async def serve(n: int) -> None:
        history.append({"role": "user", "content": f"where is parcel {n} now"})
        data = {"model": "gpt-4", "messages": list(history), "litellm_call_id": f"call-{n}"}
        out = await proxy.pre_call_hook(user_api_key_dict=key, data=data, call_type="acompletion")
        response = await litellm.acompletion(model="gpt-4", messages=out["messages"],
                                             mock_response=answer(out["messages"], n))
        # As ProxyLogging.post_call_success_hook calls it (with the data the pre-call hooks
        # returned), not through it: that imports the proxy's whole server app, some 8 s.
        assert await hook.async_post_call_success_hook(out, key, response) is None
        reported.append(response.usage.prompt_tokens)
        history.append({"role": "assistant", "content": response.choices[0].message.content})

    async def main() -> None:
        for n in range(3):
            await serve(n)

    try:
        asyncio.run(main())
    finally:
        litellm.callbacks = before
    assert [r.before.tokens_reported for r in reports] == [None, *reported[:2]]
    assert [r.before.tokens for r in reports] == [reported[0] - HIDDEN, *reported[1:]]
