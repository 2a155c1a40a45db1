"""``contextpolicy.handlers`` on histories of any shape, on the compiled kernel and on the twin:
types, roles and ids are read as the kernels read them (the text of a str, and nothing else), and
a property test draws histories of every shape and checks that no handler ever returns more than
it was given, nor touches an id.
"""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextpolicy import CompressRequest, ContextPlanError, Fragment
from contextpolicy.content import snapshot
from contextpolicy.handlers import (
    Summarize,
    clear_tool_results,
    cut_text,
    render_transcript,
    summarize,
    truncate_messages,
)
from tests.support import strategies
from tests.support.handlers import (
    PLACEHOLDER,
    compress_policy,
    plan_of,
    run_checked,
    texts,
    warnings_of,
)
from tests.support.hostile_objects import LyingStr

# The whole pipeline runs on the compiled kernel and on the twin: ids [c] and [py].
pytestmark = pytest.mark.usefixtures("pipeline_kernel")


# ---------------------------------------------------------------------------------------------
# Types, roles and ids read as the kernels read them: the text of a str, and nothing else

# A part type that is not a str (a list or an object cannot even be hashed): an opaque part.
ODD_TYPES = [["text"], {"type": "text"}, ["tool_result"], 7, None, 1.5]
LONG = "x" * 400


def odd_history(odd: object) -> list[dict]:
    """A tool call and its result, with a part of type ``odd`` beside every text, each holding
    the keys of the part it would be if its type were a str."""
    return [
        {"role": "user", "content": [{"type": odd, "text": LONG},
                                     {"type": "text", "text": "question " + LONG}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "c1", "name": "search", "input": {"q": 1}},
            {"type": odd, "id": "c2", "name": "search", "input": {"q": LONG}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": [
            {"type": odd, "text": LONG, "tool_use_id": "c2"},
            {"type": "text", "text": "result " + LONG}]}]},
        {"role": "assistant", "content": [{"type": "text", "text": "answer " + LONG},
                                          {"type": odd, "content": LONG}]},
        {"role": "user", "content": "next"},
        {"role": "assistant", "content": "ok"},
    ]


def odd_parts(messages: list[dict], odd: object) -> list[tuple[int, int, object]]:
    """Every part whose type is ``odd``, where it is, read here."""
    out = []
    for i, m in enumerate(messages):
        content = m.get("content")
        parts = content if isinstance(content, list) else []
        for j, part in enumerate(parts):
            inner = part.get("content") if part.get("type") == "tool_result" else None
            for k, p in enumerate(inner if isinstance(inner, list) else [part]):
                if type(p.get("type")) is type(odd) and p.get("type") == odd:
                    out.append((i, j * 10 + k, snapshot(p)))
    return out


@pytest.mark.parametrize("odd", ODD_TYPES, ids=repr)
@pytest.mark.parametrize("handler_id", ["truncate-messages", "clear-tool-results", "summarize"])
def test_a_part_whose_type_is_not_a_str_is_opaque_to_every_handler(handler_id, odd):
    seen: list[str] = []

    def summariser(text: str, target: int) -> str:
        seen.append(text)
        return "short"

    handlers = {"truncate-messages": truncate_messages(max_chars=100),
                "clear-tool-results": clear_tool_results(keep=0, min_chars=1, clear_inputs=True),
                "summarize": summarize(summariser, min_target_chars=1)}
    history = odd_history(odd)
    result, warnings = run_checked(plan_of(history), compress_policy(handler_id, keep_groups=1),
                                   {handler_id: handlers[handler_id]})
    step = result.report.steps[0]
    assert step.status == "applied", step
    assert warnings_of(result) == warnings  # the pairing reads no id of an opaque part
    out = result.plan.fragment("history").messages
    if handler_id == "summarize":
        assert "[part]" in seen[0] and "[called search(" in seen[0]
        return
    # Every text was handled, every opaque part left as it was, with all its keys.
    assert odd_parts(out, odd) == (odd_parts(history, odd) if handler_id == "truncate-messages"
                                   else [p for p in odd_parts(history, odd) if p[0] != 2])
    if handler_id == "truncate-messages":
        cut = [cut_text(t, 50, 25) if len(t) > 100 else t
               for m in history for t in texts(m.get("content"))]
        assert [t for m in out for t in texts(m.get("content"))] == cut
        assert [len(t) for t in cut] == [len(cut_text(LONG, 50, 25))] * 3 + [4, 2]
    else:  # the result (odd part and all) cleared, its call's input emptied
        assert out[2]["content"][0]["content"] == [
            {"type": "text", "text": PLACEHOLDER.format(chars=len("result " + LONG))}]
        assert out[1]["content"][0]["input"] == {}


def test_handlers_read_types_roles_and_ids_by_their_text():
    # Called directly (not through process_context, which hands them plain copies): a str
    # subclass that says it equals anything and a role that is not a str change nothing.
    lying = LyingStr("image")
    messages = [
        {"role": "user", "content": [{"type": lying, "text": LONG},
                                     {"type": LyingStr("text"), "text": LONG}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": LyingStr("c1"), "name": "search", "input": {}}]},
        {"role": "user", "content": [{"type": LyingStr("tool_result"), "tool_use_id": "c1",
                                      "content": LONG}]},
        {"role": ["tool"], "tool_call_id": "c1", "content": LONG},
        {"role": {"name": "tool"}, "content": [{"type": ["tool_result"], "content": LONG}]},
    ]
    given_copy = snapshot(messages)
    cut = truncate_messages(max_chars=100).truncate(messages)
    short = cut_text(LONG, 50, 25)
    assert [p["text"] for p in cut[0]["content"]] == [LONG, short]  # an image, a text part
    assert cut[2]["content"][0]["content"] == short  # a tool result's content
    assert cut[4] is messages[4]  # its part is opaque
    cleared = clear_tool_results(keep=0, min_chars=1, exclude_tools=("lookup",)).clear(messages)
    # The one result answers the call by the id's text, so its tool is known and not excluded.
    assert cleared[2]["content"][0]["content"] == PLACEHOLDER.format(chars=len(LONG))
    assert [m is o for m, o in zip(cleared, messages, strict=True)] == [
        True, True, False, True, True]
    transcript = render_transcript(messages)
    assert "[image]" in transcript and "['tool']: " in transcript
    assert snapshot(messages) == given_copy


# ---------------------------------------------------------------------------------------------
# Never larger, never an id touched: every shape of history


SETTINGS = settings(max_examples=150, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _kernel_figures(messages):
    from contextpolicy import _kernel

    m = _kernel.measure(messages)
    return m.chars, m.messages, m.pairing(messages)


_INFLATED = {"content", "text", "output", "thinking", "arguments", "input"}


def inflate(value, k: int):
    """``value`` with every text a handler may shorten repeated ``k`` times (roles, types and
    ids as they were): the shared strategies draw short texts."""
    if isinstance(value, str):
        return value * k
    if isinstance(value, list):
        return [inflate(v, k) for v in value]
    if isinstance(value, dict):
        return {key: inflate(v, k) if key in _INFLATED else v for key, v in value.items()}
    return value


@SETTINGS
@given(st.lists(strategies.message, max_size=40), st.integers(1, 40), st.integers(0, 4),
       st.integers(0, 200), st.integers(1, 300), st.booleans(),
       st.sampled_from([PLACEHOLDER, "[x{chars}]", "[cleared]"]))
def test_no_handler_ever_returns_more_than_it_was_given(drawn, k, keep, min_chars, max_chars,
                                                       inputs, placeholder):
    messages = [{key: inflate(v, k) if key in _INFLATED else v for key, v in m.items()}
                if isinstance(m, dict) else m for m in drawn]
    try:
        chars_in, n, pairing = _kernel_figures(messages)
    except ContextPlanError:
        return  # content the kernels refuse never reaches a handler
    given_copy = copy.deepcopy(messages)
    fragment = Fragment(id="history", kind="history", messages=messages)
    request = CompressRequest(fragment=fragment, content=messages, kept=None, target_chars=0,
                              step_id="s", counter=None, cancel=None)
    for handler in (clear_tool_results(keep=keep, min_chars=min_chars, clear_inputs=inputs,
                                       placeholder=placeholder),
                    truncate_messages(max_chars=max_chars, head=max_chars // 3,
                                      tail=max_chars // 3),
                    summarize(lambda text, target: text[:target], min_target_chars=0)):
        try:
            out = handler(request)
        except ValueError as exc:  # a summary no shorter than what it replaces is refused
            assert isinstance(handler, Summarize) and "is not shorter" in str(exc)
            continue
        assert snapshot(messages) == snapshot(given_copy)  # the handler's input untouched
        chars_out, n_out, pairing_out = _kernel_figures(out)
        assert chars_out <= chars_in
        if isinstance(handler, Summarize):
            assert n_out == 1
            continue
        # Clearing and cutting keep every message, every id and so the pairing.
        assert n_out == n and pairing_out == pairing
        for a, b in zip(messages, out, strict=True):
            assert a.get("role") == b.get("role") and a.get("type") == b.get("type")
            assert a.get("tool_call_id") == b.get("tool_call_id")
            assert a.get("call_id") == b.get("call_id")


@SETTINGS
@given(strategies.text.filter(bool) | st.text(min_size=1, max_size=200),
       st.integers(0, 60), st.integers(0, 60))
def test_cut_text_is_a_head_and_a_tail_of_whole_characters(text, head, tail):
    from contextpolicy.handlers.truncate import joins_previous

    out = cut_text(text * 5, head, tail)
    text = text * 5
    if out is None:
        return
    assert len(out) < len(text)
    marker_at = out.index("[... ")
    h = out[:marker_at]
    t = out[out.index(" chars cut ...]") + len(" chars cut ...]"):]
    assert text.startswith(h) and text.endswith(t)
    assert len(h) <= head and len(t) <= tail
    if h:
        assert not joins_previous(text, len(h))
    if t and len(t) < len(text):
        assert not joins_previous(text, len(text) - len(t))
