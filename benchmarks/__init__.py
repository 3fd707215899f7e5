"""Benchmark commands, outside the installed packages: ``python -m benchmarks.<name>``.

Nothing here is a test; each command prints figures beside a baseline measured in the same run.
The reference workloads W1/W2/W3 are defined once, in `rowbus.workloads`; `benchmarks.workloads`
turns them into protocol events for the benchmarks that need no database.
"""
