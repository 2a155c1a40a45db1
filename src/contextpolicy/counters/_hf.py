"""Hugging Face tokenizers (extra ``[hf]``): the tokenizer of an open model, from its local
``tokenizer.json``, and optionally its chat template for exact chat framing.

``count_text`` is the number of tokens of ``encode(text, add_special_tokens=False)``: no BOS or
post-processor tokens are added, and added tokens in the text are parsed as the tokenizer parses
them. With a chat template, ``count_messages`` renders the messages as transformers'
``apply_chat_template`` does (a sandboxed Jinja2 environment, ``add_generation_prompt=False``)
and counts the rendered string the same way.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from os import PathLike, fspath
from pathlib import Path
from typing import Any

from ..errors import ContextPolicyError
from ._base import exact_text, import_extra, well_formed

__all__ = ["HfChatCounter", "HfCounter", "hf_counter"]

# The special tokens of a tokenizer_config.json that chat templates read as variables.
_SPECIAL_TOKEN_KEYS = (
    "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
)


def _tokenizers() -> Any:
    return import_extra("tokenizers", package="tokenizers", extra="hf", what="hf_counter")


class HfCounter:
    """Tokens of a Hugging Face tokenizer: ``count_text``, ``count_texts`` (one batch call),
    ``name`` (``"hf:<name>"``) and ``exact`` (always true).

    Built by :func:`hf_counter`. It pickles with its tokenizer (tokenizers serialises it).
    """

    __slots__ = ("_encode", "_encode_batch", "name", "tokenizer")

    exact = True

    def __init__(self, tokenizer: Any, name: str) -> None:
        self.tokenizer = tokenizer
        self.name = name
        self._bind()

    def _bind(self) -> None:
        tokenizer = self.tokenizer
        self._encode = tokenizer.encode
        batch = getattr(tokenizer, "encode_batch_fast", None)
        self._encode_batch = batch if callable(batch) else tokenizer.encode_batch

    def count_text(self, text: str) -> int:
        """Tokens of ``encode(text, add_special_tokens=False)``."""
        if type(text) is not str:
            text = exact_text(text)
        try:
            return len(self._encode(text, add_special_tokens=False))
        except TypeError:
            # A lone surrogate cannot cross into Rust (tokenizers says "must be str"): read it
            # as tiktoken does, as U+FFFD.
            fixed = well_formed(text)
            if fixed == text:
                raise
            return len(self._encode(fixed, add_special_tokens=False))

    def count_texts(self, texts: Sequence[str]) -> list[int]:
        """Tokens of each text, in order, in one call of the tokenizer's batch encoder
        (``encode_batch_fast`` when the installed tokenizers has it, else ``encode_batch``)."""
        checked = [t if type(t) is str else exact_text(t) for t in texts]
        try:
            encodings = self._encode_batch(checked, add_special_tokens=False)
        except TypeError:
            encodings = self._encode_batch(list(map(well_formed, checked)),
                                           add_special_tokens=False)
        return [len(e) for e in encodings]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    def __getstate__(self) -> dict[str, Any]:
        return {"tokenizer": self.tokenizer, "name": self.name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.tokenizer = state["tokenizer"]
        self.name = state["name"]
        self._bind()


class HfChatCounter(HfCounter):
    """An :class:`HfCounter` with the model's chat template: ``count_messages(messages)`` is the
    number of tokens of the messages rendered through it (the framing included).

    ``template`` is the template's source, ``template_vars`` what it is rendered with besides
    ``messages`` and ``add_generation_prompt`` (the special tokens of a tokenizer_config.json).
    """

    __slots__ = ("_compiled", "template", "template_vars")

    def __init__(
        self, tokenizer: Any, name: str, template: str, template_vars: Mapping[str, Any]
    ) -> None:
        super().__init__(tokenizer, name)
        self.template = template
        self.template_vars = dict(template_vars)
        self._compiled = _compile(template)

    def render(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """The messages as the template renders them (``add_generation_prompt=False``)."""
        try:
            return str(self._compiled.render(
                **self.template_vars, messages=messages, add_generation_prompt=False,
            ))
        except Exception as exc:  # jinja2's errors and the template's raise_exception()
            raise ContextPolicyError(
                f"the chat template of {self.name} failed on these messages: "
                f"{type(exc).__name__}: {exc}", path="counter.chat_template",
                code="chat-template-failed",
            ) from exc

    def count_messages(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Tokens of the rendered messages, special tokens parsed as the tokenizer parses
        them (``add_special_tokens=False``: the template writes its own BOS)."""
        if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
            raise ContextPolicyError(
                f"count_messages expects a list of messages, got {type(messages).__name__}",
                path="messages", code="expected-list",
            )
        return self.count_text(self.render(messages))

    def __getstate__(self) -> dict[str, Any]:
        return {**super().__getstate__(), "template": self.template,
                "template_vars": self.template_vars}

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self.template = state["template"]
        self.template_vars = state["template_vars"]
        self._compiled = _compile(self.template)


def _compile(template: str) -> Any:
    """The template compiled as transformers compiles chat templates: an immutable sandbox,
    ``trim_blocks`` and ``lstrip_blocks``, loop controls, ``tojson`` keeping non-ASCII text,
    ``raise_exception`` and ``strftime_now``."""
    jinja2 = import_extra("jinja2", package="jinja2", extra="hf", what="a chat template")
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    def tojson(value: Any, ensure_ascii: bool = False, indent: Any = None,
               separators: Any = None, sort_keys: bool = False) -> str:
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                          separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"],
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        return env.from_string(template)
    except jinja2.TemplateError as exc:
        raise ContextPolicyError(
            f"the chat template does not compile: {exc}", path="chat_template",
            code="invalid-chat-template",
        ) from exc


def _is_template(value: str) -> bool:
    return "{{" in value or "{%" in value


def _token_text(value: Any) -> str | None:
    # tokenizer_config.json writes a special token as its text or as an AddedToken dict.
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _template_from_config(path: Path) -> tuple[str, dict[str, Any]]:
    """The chat template and the special-token variables of a tokenizer_config.json (or the
    template of a ``.jinja`` file, or of a ``chat_template.jinja`` beside the config)."""
    if not path.is_file():
        raise ContextPolicyError(
            f"no such file: {fspath(path)!r}; expected a Jinja2 chat template, a "
            "tokenizer_config.json holding one, or a chat_template.jinja",
            path="chat_template", code="chat-template-not-found",
        )
    if path.suffix == ".jinja":
        return path.read_text("utf-8"), {}
    try:
        config = json.loads(path.read_text("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ContextPolicyError(
            f"{fspath(path)!r} is not a JSON file: {exc}", path="chat_template",
            code="invalid-chat-template",
        ) from exc
    if not isinstance(config, dict):
        raise ContextPolicyError(
            f"{fspath(path)!r} holds {type(config).__name__}; expected a tokenizer_config.json "
            "object", path="chat_template", code="invalid-chat-template",
        )
    variables = {key: text for key in _SPECIAL_TOKEN_KEYS
                 if (text := _token_text(config.get(key))) is not None}
    template = config.get("chat_template")
    if isinstance(template, list):
        # Named templates ([{"name": "default", "template": ...}, {"name": "tool_use", ...}]).
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    if template is None and (path.parent / "chat_template.jinja").is_file():
        template = (path.parent / "chat_template.jinja").read_text("utf-8")
    if not isinstance(template, str):
        raise ContextPolicyError(
            f"{fspath(path)!r} has no chat_template (nor a default one, nor a "
            "chat_template.jinja beside it)", path="chat_template", code="no-chat-template",
        )
    return template, variables


def _load_tokenizer(source: Any) -> tuple[Any, str]:
    """The tokenizer and its default name: a file's stem (its folder's name for a file named
    tokenizer.json), or the model type of a Tokenizer object."""
    tokenizers = _tokenizers()
    if isinstance(source, tokenizers.Tokenizer):
        tokenizer = source
        if tokenizer.truncation is not None or tokenizer.padding is not None:
            # A count is of the whole text: a copy without them (the caller's stays as it is).
            tokenizer = tokenizers.Tokenizer.from_str(tokenizer.to_str())
            tokenizer.no_truncation()
            tokenizer.no_padding()
        return tokenizer, type(tokenizer.model).__name__
    if not isinstance(source, (str, PathLike)):
        raise ContextPolicyError(
            f"expected the path of a tokenizer.json or a tokenizers.Tokenizer, got "
            f"{type(source).__name__}", path="tokenizer", code="invalid-tokenizer",
        )
    path = Path(source)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise ContextPolicyError(
            f"no such file: {fspath(path)!r}; expected a Hugging Face tokenizer.json (or the "
            "folder holding one)", path="tokenizer", code="tokenizer-not-found",
        )
    try:
        tokenizer = tokenizers.Tokenizer.from_file(fspath(path))
    except Exception as exc:  # tokenizers raises a bare Exception on a malformed file
        raise ContextPolicyError(
            f"{fspath(path)!r} is not a tokenizer.json that tokenizers can read: {exc}",
            path="tokenizer", code="invalid-tokenizer",
        ) from exc
    tokenizer.no_truncation()
    tokenizer.no_padding()
    name = path.parent.name if path.stem == "tokenizer" and path.parent.name else path.stem
    return tokenizer, name


def hf_counter(
    path_or_tokenizer: str | PathLike[str] | Any,
    *,
    chat_template: str | PathLike[str] | None = None,
    name: str | None = None,
) -> HfCounter:
    """An exact counter of a Hugging Face tokenizer (extra ``[hf]``), read offline.

    ``path_or_tokenizer`` is a local ``tokenizer.json`` (or the folder holding one) or a
    ``tokenizers.Tokenizer``; a tokenizer's truncation and padding are never applied to a count.
    ``name`` names the counter (``"hf:<name>"``; by default the file's folder or stem).

    ``chat_template`` (a Jinja2 template string, or the path of a ``tokenizer_config.json``
    holding one, whose special tokens ``bos_token``, ``eos_token``... the template then reads,
    or of a ``.jinja`` file) gives the counter ``count_messages``, the exact count of the
    rendered conversation. Without it the counter has no ``count_messages`` at all, and the core
    sums ``count_text`` over the text pieces of each message. A string holding ``{{`` or ``{%``
    is a template; any other string is a path.
    """
    tokenizer, default_name = _load_tokenizer(path_or_tokenizer)
    if name is not None and (not isinstance(name, str) or not name):
        raise ContextPolicyError(
            f"expected a non-empty str, got {name!r}", path="name", code="expected-string",
        )
    label = f"hf:{exact_text(name) if name is not None else default_name}"
    if chat_template is None:
        return HfCounter(tokenizer, label)
    variables: dict[str, Any] = {}
    if isinstance(chat_template, str) and _is_template(chat_template):
        template = exact_text(chat_template)
    elif isinstance(chat_template, (str, PathLike)):
        template, variables = _template_from_config(Path(chat_template))
    else:
        raise ContextPolicyError(
            f"expected a Jinja2 template string or the path of a tokenizer_config.json, got "
            f"{type(chat_template).__name__}", path="chat_template", code="invalid-chat-template",
        )
    return HfChatCounter(tokenizer, label, template, variables)
