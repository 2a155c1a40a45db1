"""The JSONL engine: the byte scan of lines, report entries, the runner and its workers."""
