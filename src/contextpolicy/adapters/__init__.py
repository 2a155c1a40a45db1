"""The adapters layer: a context policy inside the frameworks agents run in.

Each framework gets a module of its own that imports its extra only when used and converts that
framework's messages to and from the plain chat dicts the core works on.
"""

__all__: list[str] = []
