"""Built-in compress handlers: a compress step that works with one line of configuration.

- :func:`clear_tool_results` (id ``clear-tool-results``): all but the newest ``keep`` tool
  results replaced by a placeholder that says how many chars were cleared; ids, names and
  pairing untouched; optionally the calls' arguments too; never a tool in ``exclude_tools``.
- :func:`truncate_messages` (id ``truncate-messages``): long texts cut to a head, a marker
  naming the cut and a tail, in code points, never inside a character.
- :func:`summarize` (id ``summarize``): the messages a step hands over replaced by one summary
  message from your function (sync or async) or chat model, marked in its metadata.

Each factory takes its parameters as keyword arguments and returns a small picklable object;
:func:`registry` maps handlers to their ids for ``process_context(..., handlers=...)``,
:func:`defaults` gives the ones that need no function, and :func:`from_config` reads a handlers
document (the command line's ``--handlers HANDLERS.json``). A policy names them by id::

    {"id": "old-outputs", "kind": "compress", "fragmentId": "history",
     "handlerId": "clear-tool-results", "targetChars": 4000}

The report of a step they applied carries ``handlerFigures`` (results cleared, messages
truncated, messages summarised, chars removed), measured by the core from what the handler was
given and what it returned.

The names load on first use: importing this package costs neither numpy nor the kernel.
"""

from __future__ import annotations

from .._lazy import lazy_exports

TYPE_CHECKING = False

_EXPORTS: dict[str, str] = {
    "BuiltinHandler": "._base",
    **dict.fromkeys(("BUILTIN_IDS", "FROM_FILES", "parse_handlers"), ".params"),
    **dict.fromkeys(("ClearToolResults", "clear_tool_results"), ".clear"),
    **dict.fromkeys(("TruncateMessages", "cut_text", "truncate_messages"), ".truncate"),
    **dict.fromkeys(("AsyncSummarize", "Summarize", "is_summary", "render_transcript",
                     "summarize"), ".summary"),
    **dict.fromkeys(("defaults", "from_config", "from_spec", "registry", "with_defaults"),
                    "._registry"),
}

__all__ = [
    "BUILTIN_IDS",
    "FROM_FILES",
    "AsyncSummarize",
    "BuiltinHandler",
    "ClearToolResults",
    "Summarize",
    "TruncateMessages",
    "clear_tool_results",
    "cut_text",
    "defaults",
    "from_config",
    "from_spec",
    "is_summary",
    "parse_handlers",
    "registry",
    "render_transcript",
    "summarize",
    "truncate_messages",
    "with_defaults",
]

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)

if TYPE_CHECKING:
    from ._base import BuiltinHandler
    from ._registry import defaults, from_config, from_spec, registry, with_defaults
    from .clear import ClearToolResults, clear_tool_results
    from .params import BUILTIN_IDS, FROM_FILES, parse_handlers
    from .summary import AsyncSummarize, Summarize, is_summary, render_transcript, summarize
    from .truncate import TruncateMessages, cut_text, truncate_messages
