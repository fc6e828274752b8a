"""Memory and gradient accumulation: the event recorder behind `track_memory`,
`estimate_memory` and `trace_grads`, their records and their plots."""
