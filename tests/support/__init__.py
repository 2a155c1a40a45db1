"""What the test modules share: strategies, hostile objects, the command line, JSONL, scan,
differential and handler helpers, the agent frameworks' fakes, the documentation's examples."""
