"""``contextpolicy.counters``: exact figures against the reference tokenizers (stock tiktoken
built offline from bpe-openai's own ranks, a Hugging Face tokenizer built in the test), no
network, pickling, the memo of ``cached`` on a growing history, and the counters inside
``process_context`` and ``check_input_budget``. Marked ``extras``: CI runs it after installing
``contextpolicy[tiktoken,hf]``; every module test runs on both kernels."""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import pickle
import socket
import subprocess
import sys
import textwrap
import threading
from importlib import resources
from pathlib import Path

import bpe_openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from contextpolicy import (
    ContextPlan,
    ContextPolicyError,
    Fragment,
    check_input_budget,
    process_context,
    synthetic,
)
from contextpolicy import _kernel as kernel_chooser
from contextpolicy.counters import Counter, _tiktoken, cached, hf_counter, tiktoken_counter

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


def pieces_of(messages: list[dict]) -> list[str]:
    return [p for i, m in enumerate(messages) for p in kernel_chooser.message_text_pieces(m, i)]


# ---------------------------------------------------------------------------------------------
# Stock tiktoken, built offline from the ranks bpe-openai ships (never downloaded).


def bundled_ranks(encoding: str) -> dict[bytes, int]:
    ranks = {}
    data = resources.files("bpe_openai.data").joinpath(f"{encoding}.tiktoken.gz")
    with data.open("rb") as raw, gzip.open(raw, "rt", encoding="ascii") as lines:
        for line in lines:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    return ranks


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
    import tiktoken
    import tiktoken_ext.openai_public as openai_public
    built = {}
    saved = openai_public.load_tiktoken_bpe
    try:
        with no_network():
            for name in _tiktoken.ENCODINGS:
                openai_public.load_tiktoken_bpe = lambda *a, _n=name, **k: bundled_ranks(_n)
                built[name] = tiktoken.Encoding(**getattr(openai_public, name)())
    finally:
        openai_public.load_tiktoken_bpe = saved
    return built


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

WORDS = ["hello", "world", "user", "assistant", "system", "tool", "the", "order", "is", "late",
         "where", "my", "?", ".", ","]
SPECIAL = ["<|im_start|>", "<|im_end|>", "<s>"]
CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
)


def word_tokenizer() -> Tokenizer:
    """One token per word or punctuation run ([UNK] for words it does not know), [CLS] ... [SEP]
    added by its post-processor, and the ChatML markers as special tokens."""
    vocab = {w: i for i, w in enumerate(["[UNK]", "[CLS]", "[SEP]", *SPECIAL, *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(SPECIAL)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 1), ("[SEP]", 2)]
    )
    return tok


def bpe_tokenizer() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIAL,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    sample = [p for trace in synthetic.agent_trace_corpus(2, seed=1) for p in pieces_of(trace)]
    tok.train_from_iterator(sample, trainer)
    return tok


@pytest.fixture(scope="module")
def word_json(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("models") / "tiny-words" / "tokenizer.json"
    path.parent.mkdir()
    word_tokenizer().save(str(path))
    return path


@pytest.fixture(scope="module")
def bpe_json(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("models") / "tiny-bpe.json"
    bpe_tokenizer().save(str(path))
    return path


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

