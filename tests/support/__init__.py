"""What the test modules share: strategies, hostile objects, the command line and JSONL helpers, the documentation's examples."""
