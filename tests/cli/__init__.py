"""The command line: each command end to end, in processes of its own, on both kernels."""
