"""The core: plans, policies, process_context in its three modes, the one-call path, the contract and its reports."""
