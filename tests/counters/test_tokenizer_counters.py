"""``contextpolicy.counters``' tokenizer counters: exact figures of ``tiktoken_counter`` and
``hf_counter`` against the reference tokenizers (stock tiktoken built offline from bpe-openai's
own ranks, a Hugging Face tokenizer built in the test), chat templates, errors, pickling, no
network, and a core that never imports a tokenizer library. Marked ``extras``: CI runs it after
installing ``contextpolicy[tiktoken,hf]``; every module test runs on both kernels."""

from __future__ import annotations

import contextlib
import json
import pickle
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import bpe_openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from contextpolicy import ContextPolicyError, synthetic
from contextpolicy.counters import Counter, _tiktoken, cached, hf_counter, tiktoken_counter
from tests.support.tiny_tokenizers import (
    CHATML,
    pieces_of,
    save_bpe_json,
    save_word_json,
    word_tokenizer,
)
from tests.support.tiny_tokenizers import stock_tiktoken as build_stock_tiktoken

pytestmark = [pytest.mark.extras, pytest.mark.usefixtures("pipeline_kernel")]

SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# Unicode the encodings split in every way: scripts, combining marks, emoji sequences, runs of
# whitespace, digits, contractions, special-token text, and (valid in a Python str) lone
# surrogates, which tiktoken reads as U+FFFD.
PIECES = [" ", "  ", "\n", "\r\n", "\t", "\u3000", "abc", "ABC", "'s", "'LL", "123456", "😀",
          "🏳️‍🌈", "é", "e\u0301", "ß", "İ", "漢字", "ｱｲ", "مرحبا", " !", "...", "<|endoftext|>",
          "<|endofprompt|>", "\x00"]
unicode_text = st.one_of(
    st.text(),
    st.text(st.characters(codec=None, exclude_categories=())),
    st.lists(st.sampled_from(PIECES)).map("".join),
    st.text(st.sampled_from(list(" \n'sdtmllve0123456789aZé漢😀\u0301.,!?/\\-_<|>"))),
)


# ---------------------------------------------------------------------------------------------
# Stock tiktoken, built offline from the ranks bpe-openai ships (never downloaded).


@contextlib.contextmanager
def no_network():
    def refuse(*args, **kwargs):
        raise OSError("the test refuses network access")

    saved = (socket.socket.connect, socket.socket.connect_ex, socket.create_connection,
             socket.getaddrinfo)
    socket.socket.connect = socket.socket.connect_ex = refuse
    socket.create_connection = socket.getaddrinfo = refuse
    try:
        yield
    finally:
        (socket.socket.connect, socket.socket.connect_ex, socket.create_connection,
         socket.getaddrinfo) = saved


@pytest.fixture(scope="module")
def stock_tiktoken():
    """``{encoding: tiktoken.Encoding}`` built with the network refused: the ranks from
    bpe-openai's wheel, the pattern and special tokens from tiktoken_ext."""
    with no_network():
        return {name: build_stock_tiktoken(name) for name in _tiktoken.ENCODINGS}


# ---------------------------------------------------------------------------------------------
# tiktoken_counter


def test_tiktoken_counter_is_named_exact_and_a_counter():
    for name in ("o200k_base", "cl100k_base"):
        counter = tiktoken_counter(name)
        assert isinstance(counter, Counter)
        assert (counter.name, counter.exact) == (f"tiktoken:{name}", True)
    assert tiktoken_counter().name == "tiktoken:o200k_base"


def test_tiktoken_counts_known_figures():
    o200k, cl100k = tiktoken_counter("o200k_base"), tiktoken_counter("cl100k_base")
    # Figures of stock tiktoken 0.14 (len(encode_ordinary)).
    assert o200k.count_text("hello world") == 2
    assert o200k.count_text("") == 0
    assert o200k.count_text(_tiktoken._PROBE) == 23
    assert cl100k.count_text(_tiktoken._PROBE) == 24
    # Special-token text is ordinary text: " <", "|", "end", "of", "text", "|", ">".
    assert o200k.count_text("hello world <|endoftext|>") == 9
    assert cl100k.count_text("<|endoftext|>") > 1
    assert type(o200k.count_text("hello")) is int


@SETTINGS
@given(unicode_text)
def test_tiktoken_counter_equals_bpe_openai_encode_ordinary(text):
    for name in _tiktoken.ENCODINGS:
        reference = bpe_openai.get_encoding(name)
        assert tiktoken_counter(name).count_text(text) == len(reference.encode_ordinary(text))


@SETTINGS
@given(unicode_text)
def test_tiktoken_counter_equals_stock_tiktoken(stock_tiktoken, text):
    for name, encoding in stock_tiktoken.items():
        expected = len(encoding.encode_ordinary(text))
        assert tiktoken_counter(name).count_text(text) == expected
        assert tiktoken_counter(encoding).count_text(text) == expected


def test_tiktoken_counter_equals_stock_tiktoken_on_agent_traces(stock_tiktoken):
    texts = [p for trace in synthetic.agent_trace_corpus(3, seed=5) for p in pieces_of(trace)]
    assert len(texts) > 100
    for name, encoding in stock_tiktoken.items():
        counter = tiktoken_counter(name)
        assert counter.count_texts(texts) == [len(encoding.encode_ordinary(t)) for t in texts]


def test_a_stock_tiktoken_encoding_is_accepted(stock_tiktoken):
    encoding = stock_tiktoken["o200k_base"]
    counter = tiktoken_counter(encoding)
    assert (counter.name, counter.exact) == ("tiktoken:o200k_base", True)
    assert counter.count_text("hello world <|endoftext|>") == 9
    assert counter.count_text("a\ud800b") == len(encoding.encode_ordinary("a\ud800b")) == 3


def test_an_object_with_only_encode_is_counted_as_ordinary_text():
    calls = []

    class Words:
        name = "words"

        def encode(self, text, *, allowed_special=frozenset(), disallowed_special="all"):
            calls.append(disallowed_special)
            return text.split()

    counter = tiktoken_counter(Words())
    assert (counter.name, counter.count_text("a b <|endoftext|>")) == ("tiktoken:words", 3)
    assert calls == [()]  # special-token text is never refused


def test_lone_surrogates_are_read_as_replacement_characters():
    counter = tiktoken_counter()
    assert counter.count_text("a\ud800b") == counter.count_text("a\ufffdb") == 3
    # A surrogate pair is the character it encodes.
    assert counter.count_text("\ud83d\ude00") == counter.count_text("😀")


def test_the_public_fallback_counts_when_the_native_count_is_missing(monkeypatch):
    from bpe_openai import _bindings

    real = _bindings.tokenizer_for_encoding
    encoded = []

    class EncodeOnly:
        # A binding without count (as a future bpe-openai might be): only encode.
        def __init__(self, name):
            self._real = real(name)

        def encode(self, text):
            encoded.append(text)
            return self._real.encode(text)

    monkeypatch.setattr(_tiktoken, "_BACKENDS", {})
    monkeypatch.setattr(_bindings, "tokenizer_for_encoding", EncodeOnly)
    counter = tiktoken_counter("cl100k_base")
    monkeypatch.undo()
    encoded.clear()
    texts = [p for trace in synthetic.agent_trace_corpus(2, seed=9) for p in pieces_of(trace)]
    native = tiktoken_counter("cl100k_base")
    assert counter.count_texts(texts) == native.count_texts(texts)
    # Every text went through the public encode_ordinary (bpe-openai skips empty texts).
    assert encoded == [t for t in texts if t]


def test_a_native_count_that_disagrees_with_the_probe_is_not_used(monkeypatch):
    from bpe_openai import _bindings

    real = _bindings.tokenizer_for_encoding

    class WrongCount:
        def __init__(self, name):
            self._real = real(name)

        def encode(self, text):
            return self._real.encode(text)

        def count(self, text):
            return 0

    monkeypatch.setattr(_tiktoken, "_BACKENDS", {})
    monkeypatch.setattr(_bindings, "tokenizer_for_encoding", WrongCount)
    counter = tiktoken_counter("o200k_base")
    assert counter.count_text("hello world") == 2


def test_a_missing_extra_says_what_to_install(monkeypatch):
    monkeypatch.setattr(_tiktoken, "_BACKENDS", {})
    monkeypatch.setitem(sys.modules, "bpe_openai", None)
    with pytest.raises(ImportError, match=r'pip install "contextpolicy\[tiktoken\]"'):
        tiktoken_counter("o200k_base")


def test_an_unknown_encoding_lists_the_supported_ones():
    with pytest.raises(ContextPolicyError) as info:
        tiktoken_counter("p50k_base")
    assert info.value.codes == ["unknown-encoding"]
    assert info.value.issues[0].path == "encoding"
    assert "o200k_base" in str(info.value) and "cl100k_base" in str(info.value)
    with pytest.raises(ContextPolicyError) as info:
        tiktoken_counter(200)
    assert (info.value.codes, info.value.issues[0].path) == (["invalid-encoding"], "encoding")


def test_tiktoken_counter_pickles_by_name_and_rebuilds_in_a_fresh_process():
    counter = tiktoken_counter("cl100k_base")
    data = pickle.dumps(counter)
    assert len(data) < 200  # the encoding's name, not its ranks
    copy = pickle.loads(data)
    assert (copy.name, copy.exact) == (counter.name, True)
    assert copy.count_text(_tiktoken._PROBE) == 24
    code = "import pickle, sys; c = pickle.loads(sys.stdin.buffer.read()); print(c.name, c.count_text('hello world'))"
    proc = subprocess.run([sys.executable, "-c", code], input=data, capture_output=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert proc.stdout.decode().split() == ["tiktoken:cl100k_base", "2"]


# ---------------------------------------------------------------------------------------------
# hf_counter: a WordLevel tokenizer whose figures can be counted by hand, and a small BPE.


@pytest.fixture(scope="module")
def word_json(tmp_path_factory) -> Path:
    return save_word_json(tmp_path_factory)


@pytest.fixture(scope="module")
def bpe_json(tmp_path_factory) -> Path:
    return save_bpe_json(tmp_path_factory)


def test_hf_counter_counts_without_the_post_processor(word_json):
    counter = hf_counter(word_json)
    assert isinstance(counter, Counter)
    assert (counter.name, counter.exact) == ("hf:tiny-words", True)
    # Three tokens; the tokenizer's own encode adds [CLS] and [SEP].
    assert counter.count_text("hello world unknown") == 3
    assert len(Tokenizer.from_file(str(word_json)).encode("hello world unknown")) == 5
    assert counter.count_text("where is my order?") == 5
    assert counter.count_text("") == 0
    # Added tokens in the text are parsed as the tokenizer parses them.
    assert counter.count_text("<|im_start|>hello") == 2
    assert not hasattr(counter, "count_messages")


def test_hf_counter_names(word_json, bpe_json, tmp_path):
    assert hf_counter(str(word_json)).name == "hf:tiny-words"
    assert hf_counter(word_json.parent).name == "hf:tiny-words"  # the folder holding it
    assert hf_counter(bpe_json).name == "hf:tiny-bpe"
    assert hf_counter(bpe_json, name="qwen-ish").name == "hf:qwen-ish"
    assert hf_counter(word_tokenizer()).name == "hf:WordLevel"


@SETTINGS
@given(st.lists(unicode_text, max_size=8))
def test_hf_counter_equals_the_tokenizer_one_by_one_and_in_a_batch(bpe_json, texts):
    counter = hf_counter(bpe_json)
    reference = Tokenizer.from_file(str(bpe_json))

    def expected(text):
        text = text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return len(reference.encode(text, add_special_tokens=False).ids)

    figures = [expected(t) for t in texts]
    assert [counter.count_text(t) for t in texts] == figures
    assert counter.count_texts(texts) == figures


def test_count_texts_falls_back_to_encode_batch():
    from contextpolicy.counters._hf import HfCounter

    tok = word_tokenizer()
    batches = []

    class OldTokenizers:
        # An older tokenizers: encode and encode_batch, no encode_batch_fast.
        def encode(self, text, add_special_tokens=True):
            return tok.encode(text, add_special_tokens=add_special_tokens)

        def encode_batch(self, texts, add_special_tokens=True):
            batches.append(list(texts))
            return tok.encode_batch(texts, add_special_tokens=add_special_tokens)

    counter = HfCounter(OldTokenizers(), "hf:old")
    assert counter.count_texts(["hello world", "the order is late .", ""]) == [2, 5, 0]
    assert batches == [["hello world", "the order is late .", ""]]


def test_truncation_and_padding_never_shorten_a_count(tmp_path):
    tok = word_tokenizer()
    tok.enable_truncation(max_length=4)
    tok.enable_padding(length=16)
    path = tmp_path / "truncating.json"
    tok.save(str(path))
    text = " ".join(["hello"] * 10)
    assert hf_counter(path).count_text(text) == 10
    assert hf_counter(tok).count_text(text) == 10
    assert hf_counter(tok).count_texts([text, "hello"]) == [10, 1]
    # The caller's tokenizer keeps its settings.
    assert tok.truncation["max_length"] == 4 and tok.padding["length"] == 16


def test_hf_counter_with_a_chat_template_counts_the_rendered_conversation(word_json):
    counter = hf_counter(word_json, chat_template=CHATML)
    assert isinstance(counter, Counter) and counter.exact
    messages = [{"role": "system", "content": "hello"},
                {"role": "user", "content": "where is my order?"},
                {"role": "assistant", "content": "the order is late."}]
    rendered = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    assert counter.render(messages) == rendered
    reference = Tokenizer.from_file(str(word_json))
    expected = len(reference.encode(rendered, add_special_tokens=False).ids)
    assert counter.count_messages(messages) == expected
    # By hand: two markers and the role per message, plus the words.
    assert expected == 3 * 3 + 1 + 5 + 5
    assert counter.count_messages([]) == 0


def test_a_chat_template_from_tokenizer_config_reads_its_special_tokens(word_json, tmp_path):
    config = tmp_path / "tokenizer_config.json"
    config.write_text(json.dumps({
        "bos_token": {"__type": "AddedToken", "content": "<s>", "special": True},
        "eos_token": "<|im_end|>",
        "chat_template": [
            {"name": "tool_use", "template": "{{ raise_exception('not this one') }}"},
            {"name": "default", "template": "{{ bos_token }}" + CHATML},
        ],
    }))
    counter = hf_counter(word_json, chat_template=config)
    messages = [{"role": "user", "content": "hello world"}]
    assert counter.render(messages) == "<s><|im_start|>user\nhello world<|im_end|>\n"
    assert counter.count_messages(messages) == 1 + 2 + 1 + 2
    assert counter.template_vars == {"bos_token": "<s>", "eos_token": "<|im_end|>"}


def test_a_chat_template_jinja_file_beside_the_config(word_json, tmp_path):
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    (tmp_path / "chat_template.jinja").write_text(CHATML)
    messages = [{"role": "user", "content": "hello"}]
    assert hf_counter(word_json, chat_template=tmp_path / "tokenizer_config.json"
                      ).count_messages(messages) == 4
    assert hf_counter(word_json, chat_template=str(tmp_path / "chat_template.jinja")
                      ).count_messages(messages) == 4


def test_the_template_environment_is_transformers_own(word_json):
    # trim_blocks, tojson keeping non-ASCII text, loop controls, and a sandbox that cannot
    # change the messages.
    template = ("{% for m in messages %}{% if m.role == 'tool' %}{% continue %}{% endif %}\n"
                "{{ m.content | tojson }}{% endfor %}"
                "{% set _ = messages.append({'role': 'x'}) %}")
    counter = hf_counter(word_json, chat_template=template)
    messages = [{"role": "user", "content": "héllo"}, {"role": "tool", "content": "x"}]
    with pytest.raises(ContextPolicyError) as info:
        counter.render(messages)
    assert info.value.codes == ["chat-template-failed"]
    assert len(messages) == 2
    counter = hf_counter(word_json, chat_template=template.split("{% set")[0])
    assert counter.render(messages) == '"héllo"'


def test_chat_template_errors_say_where(word_json, tmp_path):
    raising = hf_counter(word_json, chat_template="{{ raise_exception('roles must alternate') }}")
    with pytest.raises(ContextPolicyError) as info:
        raising.count_messages([{"role": "user", "content": "hi"}])
    assert info.value.codes == ["chat-template-failed"]
    assert info.value.issues[0].path == "counter.chat_template"
    assert "roles must alternate" in str(info.value)
    with pytest.raises(ContextPolicyError) as info:
        raising.count_messages("hello")
    assert (info.value.codes, info.value.issues[0].path) == (["expected-list"], "messages")
    with pytest.raises(ContextPolicyError) as info:
        hf_counter(word_json, chat_template="{% for m in messages %}")
    assert (info.value.codes, info.value.issues[0].path) == (["invalid-chat-template"],
                                                              "chat_template")
    with pytest.raises(ContextPolicyError) as info:
        hf_counter(word_json, chat_template=tmp_path / "missing_config.json")
    assert info.value.codes == ["chat-template-not-found"]
    assert "missing_config.json" in str(info.value)
    (tmp_path / "bare.json").write_text('{"eos_token": "</s>"}')
    with pytest.raises(ContextPolicyError) as info:
        hf_counter(word_json, chat_template=tmp_path / "bare.json")
    assert info.value.codes == ["no-chat-template"]
    with pytest.raises(ContextPolicyError) as info:
        hf_counter(word_json, chat_template=5)
    assert info.value.codes == ["invalid-chat-template"]


def test_hf_counter_errors_say_where(tmp_path):
    with pytest.raises(ContextPolicyError) as info:
        hf_counter(tmp_path / "nope" / "tokenizer.json")
    assert (info.value.codes, info.value.issues[0].path) == (["tokenizer-not-found"],
                                                              "tokenizer")
    assert str(tmp_path / "nope" / "tokenizer.json") in str(info.value)
    with pytest.raises(ContextPolicyError) as info:
        hf_counter(tmp_path)  # a folder without a tokenizer.json
    assert info.value.codes == ["tokenizer-not-found"]
    (tmp_path / "broken.json").write_text('{"model": 1}')
    with pytest.raises(ContextPolicyError) as info:
        hf_counter(tmp_path / "broken.json")
    assert (info.value.codes, info.value.issues[0].path) == (["invalid-tokenizer"], "tokenizer")
    with pytest.raises(ContextPolicyError) as info:
        hf_counter(42)
    assert info.value.codes == ["invalid-tokenizer"]
    with pytest.raises(ContextPolicyError) as info:
        hf_counter(word_tokenizer(), name="")
    assert (info.value.codes, info.value.issues[0].path) == (["expected-string"], "name")


def test_hf_counters_pickle(word_json):
    plain = pickle.loads(pickle.dumps(hf_counter(word_json)))
    assert (plain.name, plain.count_text("where is my order?")) == ("hf:tiny-words", 5)
    chat = pickle.loads(pickle.dumps(hf_counter(word_json, chat_template=CHATML)))
    assert chat.count_messages([{"role": "user", "content": "hello"}]) == 4


# ---------------------------------------------------------------------------------------------
# Non-str text, for every counter.


def test_count_text_of_a_non_str_is_a_clear_error(word_json):
    for counter in (tiktoken_counter(), hf_counter(word_json), cached(tiktoken_counter()),
                    cached(len)):
        for bad in (5, None, b"bytes", ["a"]):
            with pytest.raises(ContextPolicyError) as info:
                counter.count_text(bad)
            assert (info.value.codes, info.value.issues[0].path) == (["expected-string"], "text")
            assert type(bad).__name__ in str(info.value)


# ---------------------------------------------------------------------------------------------
# Offline, and light to import.


def test_every_counter_builds_and_counts_with_the_network_refused(tmp_path):
    word_tokenizer().save(str(tmp_path / "tokenizer.json"))
    script = textwrap.dedent(f"""
        import socket
        def refuse(*args, **kwargs):
            raise OSError("network refused by the test")
        socket.socket.connect = socket.socket.connect_ex = refuse
        socket.create_connection = socket.getaddrinfo = refuse

        from contextpolicy.counters import cached, hf_counter, tiktoken_counter
        counters = [tiktoken_counter("o200k_base"), tiktoken_counter("cl100k_base"),
                    hf_counter({str(tmp_path)!r}),
                    hf_counter({str(tmp_path)!r}, chat_template={CHATML!r})]
        counters.append(cached(counters[0]))
        print([c.count_text("hello world") for c in counters],
              counters[3].count_messages([{{"role": "user", "content": "hello"}}]))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[2, 2, 2, 2, 2] 4"


def test_the_core_never_imports_a_tokenizer_library():
    script = textwrap.dedent("""
        import sys
        import contextpolicy, contextpolicy.counters
        from contextpolicy import ContextPlan, process_context
        plan = ContextPlan.from_messages([{"role": "user", "content": "hi"}] * 3)
        process_context(plan, {"mode": "reduce", "triggerTokens": 1, "steps": [
            {"id": "t", "kind": "trim", "fragmentId": "history", "targetChars": 0,
             "grouping": {"kind": "user-turn"}, "keepGroups": 0}]},
            counter=contextpolicy.counters.cached(len))
        print(sorted(m for m in ("bpe_openai", "tokenizers", "jinja2", "tiktoken")
                     if m in sys.modules))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "[]"
