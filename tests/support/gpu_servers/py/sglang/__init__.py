"""Stand-in for the `sglang` package: only `python -m sglang.launch_server` (tests only)."""
