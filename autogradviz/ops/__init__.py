"""Tensors and the dispatcher: `trace_dispatch` and `storage_map`, their records
and their views; `quiet_profile`, torch's profiler without its log lines."""
