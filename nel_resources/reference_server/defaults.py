"""The reference server's option values and the defaults its command line shows, with no
imports: `nel --help` reads them (a test checks they are `ServerConfig`'s defaults)."""

REASONING_MODES = ("none", "field", "think")
# How a truncated 200 looks: a well-framed body that is cut JSON, a Content-Length body
# cut short by the connection closing, or a chunked body whose last chunk never comes.
TRUNCATE_STYLES = ("json", "eof", "chunked")
RATES = ("fail_rate", "status_429_rate", "hang_rate", "drop_rate", "reset_rate", "truncate_rate")

# The command-line flags' defaults: `ServerConfig`'s, for the flags that show one.
DEFAULTS: dict[str, object] = {
    "host": "127.0.0.1",
    "port": 0,
    "model_name": "nel-reference",
    "default_content": "The answer is 42.",
    "default_reasoning": "Let me think step by step.",
    "reasoning_mode": "none",
    "fail_rate": 0.0,
    "fail_status": 500,
    "fail_attempts": 1,
    "status_429_rate": 0.0,
    "retry_after": 1.0,
    "delay_ms": 0.0,
    "delay_ms_max": 0.0,
    "delay_match": None,
    "hang_rate": 0.0,
    "drop_rate": 0.0,
    "reset_rate": 0.0,
    "truncate_rate": 0.0,
    "truncate_style": "json",
    "status_429_first": 0,
    "barrier": 0,
    "barrier_timeout": 60.0,
    "record_bodies": 0,
}
