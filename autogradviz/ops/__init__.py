"""Tensors and the dispatcher: `trace_dispatch` and `storage_map`, their records
and their views."""
