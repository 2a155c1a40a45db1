"""``contextpolicy.counters.cached``: the memo (by exact text, bounded, shared between threads,
pickled with a fresh memo, refusing what is not a count), the memo on a growing history, and the
counters inside ``process_context`` and ``check_input_budget``. Marked ``extras``: CI runs it
after installing ``contextpolicy[tiktoken,hf]``; every module test runs on both kernels."""

from __future__ import annotations

import json
import pickle
import threading
from pathlib import Path

import pytest

from contextpolicy import (
    ContextPlan,
    ContextPolicyError,
    Fragment,
    check_input_budget,
    process_context,
    synthetic,
)
from contextpolicy.counters import Counter, _tiktoken, cached, hf_counter, tiktoken_counter
from tests.support.tiny_tokenizers import CHATML, pieces_of, save_bpe_json, save_word_json

pytestmark = [pytest.mark.extras, pytest.mark.usefixtures("pipeline_kernel")]


@pytest.fixture(scope="module")
def word_json(tmp_path_factory) -> Path:
    return save_word_json(tmp_path_factory)


@pytest.fixture(scope="module")
def bpe_json(tmp_path_factory) -> Path:
    return save_bpe_json(tmp_path_factory)


# ---------------------------------------------------------------------------------------------
# cached


class Liar(str):
    """A str whose hash and equality say every such string is the same."""

    def __hash__(self):
        return 0

    def __eq__(self, other):
        return True

    def __str__(self):
        return "lies"


def test_cached_memoises_by_text():
    seen = []

    def words(text):
        seen.append(text)
        return len(text.split())

    counter = cached(words)
    assert isinstance(counter, Counter)
    assert (counter.name, counter.exact) == ("cached(test_cached_memoises_by_text.<locals>.words)",
                                            False)
    assert [counter.count_text(t) for t in ["a b", "a b", "c", "a b"]] == [2, 2, 1, 2]
    assert seen == ["a b", "c"]
    assert (counter.hits, counter.misses) == (2, 2)
    assert counter.cache_info().currsize == 2
    counter.clear()
    assert (counter.hits, counter.misses, counter.cache_info().currsize) == (0, 0, 0)


def test_cached_keeps_the_inner_name_and_exactness():
    inner = tiktoken_counter("cl100k_base")
    counter = cached(inner)
    assert (counter.name, counter.exact) == ("cached(tiktoken:cl100k_base)", True)
    assert counter.count_text(_tiktoken._PROBE) == 24
    assert not hasattr(counter, "count_messages")


def test_cached_keys_the_exact_text_of_a_str_subclass():
    seen = []

    def chars(text):
        seen.append(type(text))
        return len(text)

    counter = cached(chars)
    assert counter.count_text(Liar("abc")) == 3
    assert counter.count_text(Liar("abcdef")) == 6  # a lying __eq__ is not a hit
    assert counter.count_text("abc") == 3
    assert seen == [str, str] and counter.misses == 2 and counter.hits == 1


def test_cached_is_bounded_least_recently_used_first():
    counter = cached(len, max_entries=2)
    for text in ["a", "bb", "a", "ccc"]:  # "bb" is the least recently used when "ccc" comes
        counter.count_text(text)
    assert counter.cache_info().currsize == 2
    misses = counter.misses
    counter.count_text("a")
    assert counter.misses == misses  # still there
    counter.count_text("bb")
    assert counter.misses == misses + 1  # evicted


def test_cached_is_shared_between_threads():
    inner = tiktoken_counter()
    counter = cached(inner)
    texts = [p for trace in synthetic.agent_trace_corpus(2, seed=3) for p in pieces_of(trace)]
    expected = [inner.count_text(t) for t in texts]
    results = {}
    barrier = threading.Barrier(4)

    def work(k):
        barrier.wait()
        results[k] = [counter.count_text(t) for t in texts]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(results[k] == expected for k in range(4))
    assert counter.cache_info().currsize == len(set(texts))
    assert counter.hits + counter.misses == 4 * len(texts)


def test_cached_delegates_count_messages_without_a_memo(word_json):
    inner = hf_counter(word_json, chat_template=CHATML)
    counter = cached(inner)
    assert counter.name == "cached(hf:tiny-words)" and counter.exact
    messages = [{"role": "user", "content": "hello world"}]
    assert counter.count_messages(messages) == counter.count_messages(messages) == 5
    assert counter.misses == 0  # the framing is counted afresh, by the inner counter
    assert counter.count_text("hello world") == 2 and counter.misses == 1


def test_cached_refuses_what_is_not_a_count():
    for bad in (1.5, -1, True, "3", None):
        counter = cached(lambda text, _b=bad: _b)
        for _ in range(2):  # never memoised
            with pytest.raises(ContextPolicyError) as info:
                counter.count_text("x")
            assert info.value.codes == ["invalid-counter-result"]
    assert cached(lambda text: __import__("numpy").int64(4)).count_text("x") == 4
    with pytest.raises(ContextPolicyError) as info:
        cached(object())
    assert (info.value.codes, info.value.issues[0].path) == (["invalid-counter"], "counter")
    for bad in (0, -5, 1.0, True, None):
        with pytest.raises(ContextPolicyError) as info:
            cached(len, max_entries=bad)
        assert (info.value.codes, info.value.issues[0].path) == (["expected-integer"],
                                                                  "max_entries")

    async def acount(text):
        return 1

    with pytest.raises(ContextPolicyError) as info:
        cached(acount)
    assert info.value.codes == ["invalid-counter"]


def test_cached_pickles_with_a_fresh_memo(word_json):
    counter = cached(tiktoken_counter("o200k_base"), max_entries=100)
    counter.count_text("hello world")
    copy = pickle.loads(pickle.dumps(counter))
    assert (copy.name, copy.max_entries, copy.misses) == ("cached(tiktoken:o200k_base)", 100, 0)
    assert copy.count_text("hello world") == 2
    chat = pickle.loads(pickle.dumps(cached(hf_counter(word_json, chat_template=CHATML))))
    assert chat.count_messages([{"role": "user", "content": "hello"}]) == 4


# ---------------------------------------------------------------------------------------------
# Inside process_context and check_input_budget.


def token_policy(trigger: int, target: int, target_chars: int) -> dict:
    return {"mode": "reduce", "triggerTokens": trigger, "targetInputTokens": target,
            "selection": {"mode": "sequence"},
            "steps": [{"id": "recent", "kind": "trim", "fragmentId": "history",
                       "field": "messages", "grouping": {"kind": "user-turn"}, "keepGroups": 1,
                       "targetChars": target_chars}]}


def transcript(n: int = 120, seed: int = 4) -> list[dict]:
    return synthetic.make_transcript(n, seed=seed)


def test_a_token_watermark_policy_with_tiktoken_and_cached_tiktoken_reports_alike():
    messages = transcript()
    inner = tiktoken_counter()
    total = sum(inner.count_text(p) for p in pieces_of(messages))
    policy = token_policy(total // 2, total // 3, 6000)
    plain = process_context(ContextPlan.from_messages(messages), policy, counter=inner)
    memo = process_context(ContextPlan.from_messages(messages), policy, counter=cached(inner))
    r = plain.report
    assert r.triggered and r.before.tokens == total
    assert r.steps[0].status == "applied" and r.after.tokens < r.before.tokens
    assert r.steps[0].tokens_before > r.steps[0].tokens_after > 0
    # The same figures; only the counter's name differs.
    assert (r.counter, memo.report.counter) == ("tiktoken:o200k_base", "cached(tiktoken:o200k_base)")
    assert memo.report.model_dump(exclude={"counter"}) == r.model_dump(exclude={"counter"})
    assert memo.input == plain.input
    # The figure is the sum over the assembled input's text pieces.
    assert r.after.tokens == sum(inner.count_text(p) for p in pieces_of(plain.input))


def test_token_figures_add_up_between_the_report_and_the_budget(bpe_json):
    system = "You are a careful support agent. Cite the order number."
    history = synthetic.make_history(60, seed=8)
    question = "Where is my order 4411?"
    plan = ContextPlan(fragments=[
        Fragment(id="system", kind="system", text=system),
        Fragment(id="history", kind="history", messages=history),
        Fragment(id="question", kind="question", text=question),
    ])
    for counter in (tiktoken_counter(), cached(tiktoken_counter("cl100k_base")),
                    hf_counter(bpe_json), cached(hf_counter(bpe_json))):
        result = process_context(plan, token_policy(3000, 2000, 4000), counter=counter)
        budget = check_input_budget(result, counter=counter)
        assert result.report.after.tokens == budget.tokens > 0, counter.name
        assert result.report.triggered, counter.name


def test_token_figures_add_up_with_a_chat_template_counter(word_json):
    # The report counts the assembled input as check_input_budget does: the conversation
    # rendered once, framing included. (Needs the core to count a chat-template counter's
    # total on the assembled input.)
    counter = hf_counter(word_json, chat_template=CHATML)
    plan = ContextPlan(fragments=[
        Fragment(id="system", kind="system", text="hello"),
        Fragment(id="history", kind="history", messages=[
            {"role": "user", "content": "where is my order ?"},
            {"role": "assistant", "content": "the order is late ."}] * 5),
        Fragment(id="question", kind="question", text="where is my order ?"),
    ])
    result = process_context(plan, token_policy(40, 30, 60), counter=counter)
    budget = check_input_budget(result, counter=counter)
    assert budget.tokens == counter.count_messages(result.input)
    assert result.report.after.tokens == budget.tokens


def test_a_cached_counter_on_a_growing_history_misses_only_the_new_texts():
    messages = transcript(200, seed=11)
    counter = cached(tiktoken_counter())
    policy = token_policy(10**9, 10**9, 10**9)  # never triggers: every message is counted
    first = process_context(ContextPlan.from_messages(messages), policy, counter=counter)
    distinct = set(pieces_of(messages))
    assert counter.misses == len(distinct)
    assert first.report.before.tokens == sum(
        tiktoken_counter().count_text(p) for p in pieces_of(messages))
    answer = {"role": "assistant", "content": "Your order left the depot this morning (#4411)."}
    follow_up = {"role": "user", "content": "Thanks. Can I change the delivery address?"}
    assert not {answer["content"], follow_up["content"]} & distinct
    hits = counter.hits
    grown = process_context(ContextPlan.from_messages([*messages, answer, follow_up]), policy,
                            counter=counter)
    assert counter.misses == len(distinct) + 2
    assert counter.hits - hits == len(pieces_of(messages))
    assert grown.report.before.tokens == first.report.before.tokens + sum(
        tiktoken_counter().count_text(m["content"]) for m in (answer, follow_up))


def test_a_trimming_call_counts_what_it_keeps_from_the_memo():
    messages = transcript(200, seed=12)
    counter = cached(tiktoken_counter())
    total = sum(counter.count_text(p) for p in pieces_of(messages))
    misses = counter.misses
    result = process_context(ContextPlan.from_messages(messages),
                             token_policy(total // 2, total // 4, 8000), counter=counter)
    assert result.report.steps[0].status == "applied"
    assert counter.misses == misses  # before, after and the step's figures: all from the memo


def test_tool_call_and_thinking_text_is_counted():
    counter = tiktoken_counter()
    arguments = json.dumps({"query": "weather in Paris tomorrow", "units": "metric"})
    call = {"role": "assistant", "content": "Let me check.", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_weather",
                                                      "arguments": arguments}}]}
    thinking = {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "The user wants a forecast, so call the tool.",
         "signature": "c2lnbmF0dXJl"},
        {"type": "text", "text": "Checking."}]}
    result = {"role": "tool", "tool_call_id": "c1", "content": "18C, light rain"}
    plan = ContextPlan(fragments=[
        Fragment(id="question", kind="question", text="Weather?"),
        Fragment(id="history", kind="history", messages=[call, result, thinking]),
    ])
    r = process_context(plan, {"mode": "validate"}, counter=counter).report
    tokens = {name: counter.count_text(text) for name, text in [
        ("content", "Let me check."), ("name", "get_weather"), ("arguments", arguments),
        ("result", "18C, light rain"), ("thinking", "The user wants a forecast, so call the tool."),
        ("text", "Checking."), ("question", "Weather?")]}
    assert r.before.tokens == sum(tokens.values())
    assert r.before.tokens > tokens["content"] + tokens["result"] + tokens["text"] + tokens[
        "question"]
    assert check_input_budget([call], counter=counter).tokens == (
        tokens["content"] + tokens["name"] + tokens["arguments"])

