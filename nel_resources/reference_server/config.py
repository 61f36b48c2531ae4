"""The reference server's options (`ServerConfig`): each field is also a `--kebab-case` flag."""

from __future__ import annotations

from dataclasses import dataclass, field

from nel_resources.reference_server.defaults import RATES, REASONING_MODES, TRUNCATE_STYLES


@dataclass
class ServerConfig:
    """Options of the reference server; each field is also a ``--kebab-case`` CLI flag."""

    host: str = "127.0.0.1"
    port: int = 0
    port_file: str | None = None
    model_name: str = "nel-reference"
    answers: str | None = None
    default_content: str = "The answer is 42."
    default_reasoning: str = "Let me think step by step."
    echo: bool = False
    reasoning_mode: str = "none"
    fail_rate: float = 0.0
    fail_status: int = 500
    fail_attempts: int = 1
    status_429_rate: float = 0.0
    retry_after: float = 1.0
    delay_ms: float = 0.0
    # A slow model's spread: each answer waits uniformly between delay_ms and this.
    delay_ms_max: float = 0.0
    # Send a delayed answer in chunks spread over its delay, as a response streaming in.
    trickle: bool = False
    # Delay only the requests whose body contains this text (a model slow on some prompts).
    delay_match: str | None = None
    hang_rate: float = 0.0
    drop_rate: float = 0.0
    reset_rate: float = 0.0
    truncate_rate: float = 0.0
    truncate_style: str = "json"
    fault_per_request: bool = False
    fault_match: str | None = None
    status_429_first: int = 0
    barrier: int = 0
    barrier_timeout: float = 60.0
    require_api_key: str | None = field(default=None, repr=False)
    fail_always_status: int | None = None
    # Every request fails with this status, its error body echoing the request's headers
    # (as some gateways do): tests check that nel redacts the echoed secrets.
    echo_headers_status: int | None = None
    # Keep the last N request bodies (parsed) in /stats as `bodies`: tests check what an
    # interceptor chain really sent.
    record_bodies: int = 0
    # A JSONL script of tool-calling turns per prompt (see `ToolScript`): the model then
    # answers with tool calls, turn by turn, as an agent would.
    tool_script: str | None = None
    # Match answers, tool scripts and `fault_match` against all the user messages of a chat
    # (joined), and number script turns over the whole chat: agents such as OpenClaw add a
    # runtime-context user message after the task, which would otherwise be "the prompt".
    match_conversation: bool = False
    # Answer `"stream": true` with a whole JSON answer, as servers that cannot stream do.
    ignore_stream: bool = False
    # Answer `/v1/completions`' `logprobs` (with `echo`, the prompt's too; see logprobs.py);
    # `no_logprobs` answers `logprobs: null`, as a server without prompt log-probabilities does.
    no_logprobs: bool = False

    def __post_init__(self) -> None:
        if self.reasoning_mode not in REASONING_MODES:
            raise ValueError(f"reasoning_mode must be one of {REASONING_MODES}")
        if self.truncate_style not in TRUNCATE_STYLES:
            raise ValueError(f"truncate_style must be one of {TRUNCATE_STYLES}")
        for name in RATES:
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {value}")

    @property
    def injects_faults(self) -> bool:
        """Whether any per-prompt fault can fire (so attempts must be counted)."""
        return sum(getattr(self, name) for name in RATES) > 0
