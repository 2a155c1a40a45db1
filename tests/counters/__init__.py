"""The token counters."""
