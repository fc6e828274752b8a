"""Distributed training: `torchrun` jobs, DDP communication timelines, the memory
planner, the pipeline simulator, and a Megatron-style tensor-parallel layer shard."""
