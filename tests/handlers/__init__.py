"""The compress handlers, alone and inside the adapters."""
