"""Evaluating one shard: the loop, its journal, sandboxes, judges, interrupts, and where a shard runs (in process, head start, remote)."""
