"""The scoring case set: real-style model answers with known truth (see `cases.jsonl`)."""
