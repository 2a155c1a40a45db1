"""``counters.usage_anchored``: an input counted as the provider reported it, plus what came
after by a local counter; reports saying per figure what was measured; ``counters.estimate``;
and, on agent traces replayed with reported usages, a token trigger firing where an exact count
fires. Every test runs on both kernels."""

from __future__ import annotations

import copy
import pickle
import re
import threading

import pytest

from contextpolicy import (
    ContextPlan,
    ContextPolicyError,
    InputBudgetError,
    StableCut,
    check_input_budget,
    process_context,
    synthetic,
)
from contextpolicy.accounting import TokenCounter
from contextpolicy.counters import InputCount, estimate, usage_anchored
from tests.support.usage_replay import Provider, agreement, token_policy

pytestmark = pytest.mark.usefixtures("pipeline_kernel")

_TOKEN = re.compile(r"[A-Za-z]+|\d|[^\sA-Za-z\d]")


def words(text: str) -> int:
    return len(_TOKEN.findall(text))


class Words:
    """``words`` as an exact counter of texts (the way ``tiktoken_counter`` is one)."""

    name, exact = "words", True

    @staticmethod
    def count_text(text: str) -> int:
        return words(text)


CHAT = [
    {"role": "system", "content": "You answer briefly."},
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris."},
    {"role": "user", "content": "And of Japan, 日本?"},
]


def test_an_input_starting_with_a_reported_one_is_the_report_plus_the_rest():
    counter = usage_anchored(words)
    assert counter.count_input(CHAT) == InputCount(sum(words(m["content"]) for m in CHAT),
                                                    False, None)
    assert counter.record(CHAT[:2], 1_000) is True
    rest = words("Paris.") + words("And of Japan, 日本?")
    assert counter.count_input(copy.deepcopy(CHAT)) == InputCount(1_000 + rest, False, 1_000)
    assert counter.count_messages(CHAT) == 1_000 + rest
    # The whole input reported: the provider's figure, measured.
    counter.record(CHAT, 1_234)
    assert counter.count_input(CHAT) == InputCount(1_234, True, 1_234)
    # The longest reported prefix wins; a changed message in it is no match.
    changed = copy.deepcopy(CHAT)
    changed[1]["content"] = "What is the capital of Spain?"
    assert counter.count_input(changed).reported is None
    assert counter.anchors == 2


def test_reports_say_what_measured_each_figure():
    plan = ContextPlan.from_messages(CHAT)
    counter = usage_anchored(estimate(4))
    first = process_context(plan, {"mode": "validate"}, counter=counter).report
    assert (first.before.tokens_exact, first.before.tokens_reported) == (False, None)
    assert first.counter == "usage+estimate:4-chars-per-token"
    sent = process_context(plan, {"mode": "validate"}, counter=counter).input
    counter.record(sent[:3], 500)
    report = process_context(plan, {"mode": "validate"}, counter=counter).report
    assert report.before.tokens == 500 + -(-len(CHAT[3]["content"]) // 4)
    assert (report.before.tokens_exact, report.before.tokens_reported) == (False, 500)
    doc = report.to_json_dict()["before"]
    assert (doc["tokensExact"], doc["tokensReported"]) == (False, 500)
    counter.record(sent, 512)
    after = process_context(plan, {"mode": "validate"}, counter=counter).report.after
    assert (after.tokens, after.tokens_exact, after.tokens_reported) == (512, True, 512)
    # Any other counter: exact as it says, nothing reported; no counter: no figure at all.
    exact = type("Exact", (), {"name": "exact", "exact": True,
                               "count_text": staticmethod(words)})()
    by_exact = process_context(plan, {"mode": "validate"}, counter=exact).report.before
    by_callable = process_context(plan, {"mode": "validate"}, counter=words).report.before
    none = process_context(plan, {"mode": "validate"}).report.before
    assert (by_exact.tokens_exact, by_exact.tokens_reported) == (True, None)
    assert report.counter_exact is False and report.to_json_dict()["counterExact"] is False
    assert process_context(plan, {"mode": "validate"}, counter=exact).report.counter_exact
    assert process_context(plan, {"mode": "validate"}).report.counter_exact is None
    assert (by_callable.tokens_exact, by_callable.tokens) == (False, by_exact.tokens)
    assert (none.tokens, none.tokens_exact, none.tokens_reported) == (None, None, None)


def test_a_reduced_input_is_counted_from_what_the_provider_saw():
    history = [m for i in range(30) for m in (
        {"role": "user", "content": f"question {i} " + "word " * 60},
        {"role": "assistant", "content": f"answer {i} " + "word " * 60})]
    messages = [{"role": "system", "content": "be brief"}, *history,
                {"role": "user", "content": "last?"}]
    counter = usage_anchored(words)
    cut = StableCut(token_policy(2_000), counter=counter)
    first = cut.process(messages)
    assert first.report.triggered and first.report.before.tokens_reported is None
    counter.record(first.input, 1_700)
    grown = [*messages, {"role": "assistant", "content": "fine"},
             {"role": "user", "content": "and then?"}]
    second = cut.process(grown)
    added = words("fine") + words("and then?")
    assert second.report.before.tokens_reported == 1_700
    assert second.report.before.tokens == 1_700 + added
    assert not second.report.triggered


def test_a_counter_that_frames_messages_counts_the_rest_as_its_difference():
    framed = Provider(words, "words")
    counter = usage_anchored(framed)
    counter.record(CHAT[:2], 900)
    rest = framed.count_messages(CHAT) - framed.count_messages(CHAT[:2])
    assert counter.count_input(CHAT) == InputCount(900 + rest, True, 900)
    assert usage_anchored(estimate()).count_input([]) == InputCount(0, False, None)


def test_an_exact_counter_of_texts_learns_the_framing_the_reports_show():
    provider = Provider(words, "words")  # 4 tokens a message, 300 beside them
    counter = usage_anchored(Words())
    counter.record(CHAT[:2], provider.count_messages(CHAT[:2]))
    # One report: no framing known yet, the rest is its texts.
    assert counter.count_input(CHAT[:3]).tokens == provider.count_messages(CHAT[:3]) - 4
    counter.record(CHAT[:3], provider.count_messages(CHAT[:3]))
    found = counter.count_input(CHAT)
    assert found == InputCount(provider.count_messages(CHAT), False,
                               provider.count_messages(CHAT[:3]))
    # An estimate learns nothing: what it misses is its own error.
    guess = usage_anchored(estimate(4))
    guess.record(CHAT[:2], 100)
    guess.record(CHAT[:3], 200)
    assert guess.count_input(CHAT).tokens == 200 + estimate(4).count_text(CHAT[3]["content"])


def test_a_replayed_call_decides_as_it_did_memo_or_not():
    # A report of an input, recorded after its call, must not change how a replay of that call
    # decides: every call's input is the same with the memo and without it. The provider counts
    # 100 tokens the local counter cannot see, so a call counted from its own report would
    # decide otherwise.
    policy = {"mode": "reduce", "triggerTokens": 150, "targetInputTokens": 60,
              "steps": [{"id": "t", "kind": "trim", "fragmentId": "history",
                         "grouping": {"kind": "user-turn"}, "keepGroups": 1,
                         "targetChars": 0}]}
    # A stored history of two turns read before the first call: the first call is counted
    # locally (137 tokens, under the trigger); its own report (237) is over it.
    history = [{"role": "system", "content": "be brief"}] + [
        {"role": role, "content": f"{role} {k} " + "w " * 25}
        for k in range(2) for role in ("user", "assistant")]
    counters = {size: usage_anchored(Words()) for size in (0, 64)}
    cuts = {size: StableCut(policy, counter=counters[size], memo_size=size) for size in counters}
    trimmed = 0
    for turn in range(10):
        history += [{"role": "user", "content": f"question {turn} " + "w " * 25}]
        sent = {}
        for size, cut in cuts.items():
            result = cut.process(history)
            sent[size] = result.input
            local = sum(words(m["content"]) for m in result.input)
            counters[size].record(result.input, local + 100)
            trimmed += result.report.triggered
        assert sent[0] == sent[64], turn
        history += [{"role": "assistant", "content": f"answer {turn} " + "w " * 25}]
    assert trimmed >= 4


def test_no_usage_is_no_report_and_wrapping_keeps_what_measured_each_figure():
    from contextpolicy.adapters._usage import anchored_counter, record_usage
    from contextpolicy.counters import cached
    from contextpolicy.prepared import prepare_policy

    counter = usage_anchored(Words())
    assert counter.record(CHAT, 0) is False  # a provider that sent no usage
    result = process_context(ContextPlan.from_messages(CHAT), {"mode": "validate"},
                             counter=counter)
    assert record_usage(counter, result, 0) is False
    assert record_usage(counter, result, None) is False
    assert counter.anchors == 0
    # An exact counter of texts is not exact for a whole input (framing it cannot see).
    assert counter.exact is False and usage_anchored(Provider(words, "w")).exact is True
    counter.record(CHAT[:3], 300)
    wrapped = cached(counter)
    report = process_context(ContextPlan.from_messages(CHAT), {"mode": "validate"},
                             counter=wrapped).report
    assert (report.before.tokens_exact, report.before.tokens_reported) == (False, 300)
    assert anchored_counter(prepare_policy({"mode": "validate"}, counter=wrapped)) is counter


def test_a_local_count_that_shrinks_is_still_the_providers_figure():
    class DropsReasoning(Provider):
        # A chat template that drops earlier assistant turns once a new user turn follows.
        def count_messages(self, messages):
            kept = [m for i, m in enumerate(messages)
                    if m["role"] != "assistant" or i == len(messages) - 1]
            return super().count_messages(kept)

    local = DropsReasoning(words, "drops")
    counter = usage_anchored(local)
    counter.record(CHAT[:3], local.count_messages(CHAT[:3]) + 7)
    found = counter.count_input(CHAT)
    assert found == InputCount(local.count_messages(CHAT) + 7, True,
                               local.count_messages(CHAT[:3]) + 7)


def test_what_cannot_be_keyed_is_not_recorded_and_nothing_the_caller_gave_changes():
    counter = usage_anchored(words)
    given = copy.deepcopy(CHAT)
    assert counter.record(given, 10) is True
    assert given == CHAT
    assert counter.record([{"role": "user", "content": object()}], 5) is False
    cyclic: list = []
    cyclic.append(cyclic)
    assert counter.record([{"role": "user", "content": cyclic}], 5) is False
    assert counter.record([], 5) is False
    assert counter.anchors == 1
    for bad in (True, -1, 3.0, "12", None):
        with pytest.raises(ContextPolicyError) as info:
            counter.record(CHAT, bad)
        assert info.value.issues[0].code == "expected-integer"
        assert info.value.issues[0].path == "input_tokens"
    with pytest.raises(ContextPolicyError) as info:
        counter.record("not messages", 5)
    assert info.value.issues[0].code == "invalid-input"
    with pytest.raises(ContextPolicyError):
        counter.count_input(tuple(CHAT))  # type: ignore[arg-type]

    class Lying(list):
        def __iter__(self):
            return iter([])

        def __len__(self):
            return 0

    # A list subclass is read from its storage, whatever its methods say.
    assert counter.count_input(Lying(CHAT)) == InputCount(10, True, 10)
    with pytest.raises(ContextPolicyError):
        usage_anchored(words, max_anchors=0)


def test_the_oldest_reports_go_first_past_the_bound():
    counter = usage_anchored(words, max_anchors=3)
    for n in range(1, 5):
        counter.record(CHAT[:n], 100 * n)
    assert counter.anchors == 3
    assert counter.count_input(CHAT[:1]).reported is None
    assert counter.count_input(CHAT[:2]) == InputCount(200, True, 200)
    counter.clear()
    assert counter.anchors == 0 and counter.count_input(CHAT).reported is None


def test_threads_recording_and_counting_agree():
    counter = usage_anchored(words)
    inputs = [CHAT[:n] for n in range(1, 5)]

    def work() -> None:
        for _ in range(200):
            for n, messages in enumerate(inputs, 1):
                counter.record(messages, 10 * n)
                assert counter.count_input(messages).reported == 10 * n

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counter.anchors == 4


def test_check_input_budget_counts_as_the_provider_did():
    counter = usage_anchored(words)
    counter.record(CHAT, 4_000)
    usage = check_input_budget(CHAT, max_tokens=5_000, counter=counter)
    assert (usage.tokens, usage.tokens_exact, usage.tokens_reported) == (4_000, True, 4_000)
    with pytest.raises(InputBudgetError) as info:
        check_input_budget(CHAT, max_tokens=3_999, counter=counter)
    assert (info.value.unit, info.value.used) == ("tokens", 4_000)


def test_estimate_is_named_and_never_exact():
    counter = estimate(4)
    assert (counter.name, counter.exact) == ("estimate:4-chars-per-token", False)
    assert [counter.count_text(t) for t in ("", "abc", "abcd", "abcde")] == [0, 1, 1, 2]
    assert estimate(2.5).count_text("x" * 10) == 4
    assert pickle.loads(pickle.dumps(counter)).count_text("abcdefgh") == 2
    for bad in (0, -1, float("inf"), float("nan"), True, "4"):
        with pytest.raises(ContextPolicyError) as info:
            estimate(bad)  # type: ignore[arg-type]
        assert info.value.issues[0].code == "expected-number"
    with pytest.raises(ContextPolicyError):
        counter.count_text(3)  # type: ignore[arg-type]
    assert TokenCounter(usage_anchored(counter)).exact is False


def test_on_agent_traces_the_anchored_trigger_fires_where_the_exact_count_does():
    sessions = [s for s in synthetic.agent_trace_corpus(40, seed=3) if len(s) <= 120][:10]
    found = agreement(sessions, Provider(words, "words"), 6_000,
                      {"text": Words(), "estimate": estimate(4)})
    assert (found["calls"], found["fired"]) == (292, 158)
    # The tokenizer's own text counts, which see neither framing nor the tools: anchored (the
    # framing learned from the reports), every decision is the exact one.
    assert found["text"] == {"anchored": 292, "alone": 276, "first": 10, "first_alone": 5}
    # No tokenizer at all (chars / 4): anchored, 95% of the decisions; alone, 54%.
    assert found["estimate"] == {"anchored": 278, "alone": 158, "first": 5, "first_alone": 1}
