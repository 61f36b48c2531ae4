"""Stand-in for the `ai-dynamo` package: only `python -m dynamo.frontend` and
`python -m dynamo.sglang` (tests only; tests/support/gpu_servers/dynamo_stand_in.py)."""
