"""The kernels: each function on the compiled kernel and on its pure twin, the records they return, held to each other (differential, hostile, fuzzed)."""
