"""Pricing calls as a prompt cache bills them (``contextpolicy.replay``): the cached prefix,
the figures and the cost, on hand-made calls and on recorded sessions, both kernels."""

from __future__ import annotations

import pytest

from contextpolicy.adapters._agent import prepare_agent_policy
from contextpolicy.replay import Prices, price_calls, price_policies, session_calls
from contextpolicy.stable import StableCut
from tests.support.replays import call_points, shipped_agent_policy, tool_session

pytestmark = pytest.mark.usefixtures("pipeline_kernel")


def msg(role: str, n: int) -> dict:
    return {"role": role, "content": "x" * n}


def test_the_leading_messages_equal_to_the_previous_call_are_read_from_the_cache():
    a, b, c, d = msg("system", 100), msg("user", 200), msg("assistant", 300), msg("user", 400)
    calls = [[a, b], [a, b, c, d], [a, d]]
    row = price_calls(calls, prices=Prices(input=1.0, cache_write=2.0, cache_read=0.5))
    assert (row.calls, row.input_chars, row.peak_chars) == (3, 300 + 1_000 + 500, 1_000)
    # call 1: nothing cached; call 2: a and b; call 3: a only (d is not at its old place)
    assert row.cached_chars == 300 + 100
    assert row.cost == pytest.approx((300 * 2 + 300 * 0.5 + 700 * 2 + 100 * 0.5 + 400 * 2) / 1e6)
    assert row.sizes == [300, 1_000, 500]
    assert row.costs[-1] == pytest.approx(row.cost) and row.costs == sorted(row.costs)
    assert row.cache_hit == pytest.approx(400 / 1_800)
    assert row.input_tokens is None and row.to_json()["inputTokens"] is None


@pytest.mark.parametrize("bad", [{"input": -1.0}, {"cache_read": float("nan")},
                                 {"cache_write": float("inf")}, {"input": 2e6},
                                 {"input": True}, {"cache_read": "0.3"}])
def test_prices_are_numbers_from_zero_to_a_million(bad):
    with pytest.raises(ValueError, match="expected a price from 0 to 1,000,000 per million"):
        Prices(**bad)


class Raising(dict):
    def __eq__(self, other: object) -> bool:
        raise RuntimeError("compared")

    __hash__ = None  # type: ignore[assignment]


def test_only_messages_sent_exactly_alike_are_read_from_the_cache():
    # A provider's cache compares the bytes it is sent: keys reordered or 1 sent as True are
    # new input from there on, whatever == says; no message's own __eq__ runs.
    a, b = {"role": "user", "content": "x" * 100, "n": 1}, msg("assistant", 50)
    for changed in ({"content": "x" * 100, "role": "user", "n": 1},
                    {"role": "user", "content": "x" * 100, "n": True}):
        row = price_calls([[a, b], [changed, b]])
        assert row.cached_chars == 0
    assert price_calls([[a, b], [dict(a), dict(b)]]).cached_chars == 150
    hostile = Raising(a)
    assert price_calls([[hostile, b], [hostile, b]]).cached_chars == 150  # the very object
    assert price_calls([[hostile, b], [Raising(a), b]]).cached_chars == 0


def test_tokens_with_a_counter_count_each_message():
    def words(text: str) -> int:
        return len(text.split())

    calls = [[{"role": "user", "content": "a b c"}],
             [{"role": "user", "content": "a b c"}, {"role": "assistant", "content": "d e"}]]
    row = price_calls(calls, counter=words)
    assert (row.input_tokens, row.cached_tokens, row.peak_tokens) == (3 + 5, 3, 5)
    assert row.cache_hit == pytest.approx(3 / 8)
    assert row.cost == pytest.approx((8 - 3) * 3.75 / 1e6 + 3 * 0.30 / 1e6)


def test_a_session_is_priced_at_each_model_call_for_every_cut():
    sessions = [tool_session(20, seed=1), tool_session(35, seed=2)]
    policy = {"mode": "reduce", "triggerChars": 20_000, "targetInputChars": 10_000, "steps": [
        {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": 10_000,
         "keepGroups": 1}]}
    prepared = prepare_agent_policy(policy)
    progress: list[int] = []
    rows = price_policies(sessions, [("trim", prepared)], progress=progress.append)
    assert [(r.policy, r.cut) for r in rows] == [(None, "none"), ("trim", "plain"),
                                                  ("trim", "stable")]
    assert progress == [40, 70] == [len(session_calls(s)) for s in sessions]
    assert session_calls(sessions[0]) == call_points(sessions[0])
    # The stable row is the stable cut's own inputs, priced; the cache starts empty per session.
    stable = StableCut(prepared)
    inputs = [[stable.process(s[:p]).input for p in call_points(s)] for s in sessions]
    want = [price_calls(i) for i in inputs]
    assert rows[2].input_chars == sum(w.input_chars for w in want)
    assert rows[2].cached_chars == sum(w.cached_chars for w in want)
    assert rows[2].cost == pytest.approx(sum(w.cost for w in want))
    none, plain, stable_row = rows
    assert none.cache_hit > stable_row.cache_hit > plain.cache_hit
    assert stable_row.cost < plain.cost < none.cost * 2


def test_the_shipped_agent_policy_costs_at_most_06_of_its_plain_cut_on_agent_traces():
    # The replay figure of the stable cut: the shipped agent policy on the agent-trace corpus
    # (the first 40 of the benchmark's 200 traces), every call priced as a prompt cache bills it.
    from contextpolicy.synthetic import agent_trace_corpus

    policy, handlers = shipped_agent_policy()
    sessions = agent_trace_corpus(40, seed=0)
    per_session: list[int] = []
    none, plain, stable = price_policies(sessions, [("agent", prepare_agent_policy(
        policy, handlers))], progress=per_session.append)
    assert stable.cost <= 0.6 * plain.cost
    assert stable.cost < 0.6 * none.cost and stable.cache_hit > 0.9
    assert plain.cost > 0.9 * none.cost  # this policy's plain cut: about what none costs
    # Every call's input within the trigger plus what that call added to the session.
    k = 0
    for calls in per_session:
        before = 0
        for size, whole in zip(stable.sizes[k:k + calls], none.sizes[k:k + calls], strict=True):
            assert size <= policy["triggerChars"] + whole - before
            before = whole
        k += calls
    assert k == stable.calls > 2_000


def test_the_shipped_agent_policy_never_sends_an_empty_history():
    # A turn whose tool results alone pass the target is kept (the trim keeps at least one
    # group), the cut plain or stable, with the question or without (a stored history).
    from contextpolicy import process_context
    from contextpolicy.adapters._agent import agent_plan

    prepared = prepare_agent_policy(*shipped_agent_policy())
    calls = [{"id": f"c{i}", "type": "function", "function": {"name": "read", "arguments": "{}"}}
             for i in range(2)]
    session = [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "My name is Ana."}, {"role": "assistant", "content": "Hi Ana."},
        {"role": "user", "content": "Read both logs."},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c0", "content": "a" * 31_000},
        {"role": "tool", "tool_call_id": "c1", "content": "b" * 31_000},
        {"role": "assistant", "content": "Both logs show the same crash."},
        {"role": "user", "content": "So fix it."},
    ]
    # The model's input (the question last), and a stored history that ends with the answer.
    for messages, question, last in ((session, True, "So fix it."),
                                     (session[:-1], False, "Both logs show the same crash.")):
        plain = process_context(agent_plan(messages, question=question), prepared).input
        stable = StableCut(prepared).process(messages, question=question).input
        for sent in (plain, stable):
            assert any(m.get("content") == "Read both logs." for m in sent)
            assert sent[-1]["content"] == last and sent[0]["role"] == "system"
            assert len(sent) == 7 - (not question)
