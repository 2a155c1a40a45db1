"""Tokenizers built in the counters' suites (a WordLevel one whose figures can be counted by
hand, a small BPE, stock tiktoken built offline), their ChatML template, and the text pieces a
counter counts. Imports ``tokenizers`` at top level: for the ``extras`` modules only."""

from __future__ import annotations

import base64
import gzip
from importlib import resources
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

from contextpolicy import _kernel as kernel_chooser
from contextpolicy import synthetic


def pieces_of(messages: list[dict]) -> list[str]:
    return [p for i, m in enumerate(messages) for p in kernel_chooser.message_text_pieces(m, i)]


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



def save_word_json(tmp_path_factory) -> Path:
    """``word_tokenizer()`` saved as ``tiny-words/tokenizer.json``."""
    path = tmp_path_factory.mktemp("models") / "tiny-words" / "tokenizer.json"
    path.parent.mkdir()
    word_tokenizer().save(str(path))
    return path


def save_bpe_json(tmp_path_factory) -> Path:
    """``bpe_tokenizer()`` saved as ``tiny-bpe.json``."""
    path = tmp_path_factory.mktemp("models") / "tiny-bpe.json"
    bpe_tokenizer().save(str(path))
    return path


def bundled_ranks(encoding: str) -> dict[bytes, int]:
    """The BPE ranks of ``encoding`` as bpe-openai's wheel ships them (never downloaded)."""
    ranks = {}
    data = resources.files("bpe_openai.data").joinpath(f"{encoding}.tiktoken.gz")
    with data.open("rb") as raw, gzip.open(raw, "rt", encoding="ascii") as lines:
        for line in lines:
            if line.strip():
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
    return ranks


def stock_tiktoken(name: str) -> Any:
    """Stock tiktoken's Encoding ``name``: the ranks from :func:`bundled_ranks`, the pattern and
    special tokens from tiktoken_ext."""
    import tiktoken
    import tiktoken_ext.openai_public as openai_public

    saved = openai_public.load_tiktoken_bpe
    openai_public.load_tiktoken_bpe = lambda *args, **kwargs: bundled_ranks(name)
    try:
        return tiktoken.Encoding(**getattr(openai_public, name)())
    finally:
        openai_public.load_tiktoken_bpe = saved
