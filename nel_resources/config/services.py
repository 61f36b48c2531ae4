"""`services:` — model endpoints nel calls or starts, gym resource servers and judges.

One flat `ServiceConfig` covers every `type:` NeMo Evaluator 0.3.0 documents; keys that
belong to other types are refused per type (see `check_type_keys`).
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from nel_resources.config._base import (
    ConfigError,
    _Strict,
    check_type_keys,
    field_defaults,
    key_error,
)
from nel_resources.config.pricing import PricingConfig
from nel_resources.wire.endpoint_url import redact_url, url_problem

_GEN_KEYS = ("temperature", "top_p", "max_tokens", "seed", "stop", "frequency_penalty",
             "presence_penalty", "n_logprobs")


class GenerationParams(_Strict):
    """Sampling parameters sent with every request (None = the server's default).

    The ranges are the ones NeMo Evaluator checks (and the OpenAI API documents).
    """

    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, ge=0.0, le=1.0)
    max_tokens: int | None = Field(None, gt=0)
    seed: int | None = None
    stop: list[str] | None = None
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    extra_body: dict[str, Any] = Field(default_factory=dict)

    @field_validator("stop", mode="before")
    @classmethod
    def _stop_list(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    def to_request(self) -> dict[str, Any]:
        """Non-null parameters in OpenAI request form."""
        out = {k: v for k, v in self.model_dump(exclude={"extra_body"}).items() if v is not None}
        out.update(self.extra_body)
        return out


class InterceptorConfig(_Strict):
    """One interceptor of a service's adapter proxy (`{name, config}`).

    The name and every field are checked when the config is loaded (nel_resources.checks.schema
    asks the proxy's registry), so a bad chain fails with the field's line, before any request.
    """

    name: str
    config: dict[str, Any] = Field(default_factory=dict)


class ProxyConfig(_Strict):
    """`proxy:` of a service: the adapter proxy between nel and the endpoint."""

    interceptors: list[InterceptorConfig] = Field(default_factory=list)
    verbose: bool = False
    extra_body: dict[str, Any] = Field(default_factory=dict)
    extra_headers: dict[str, str] = Field(default_factory=dict)
    request_timeout: float = Field(120.0, gt=0)
    max_retries: int = Field(0, ge=0)
    retry_on_status: list[int] = Field(default_factory=lambda: [429, 502, 503, 504])
    max_concurrent_upstream: int = Field(64, ge=1)


class DynamoWorkerConfig(_Strict):
    """`prefill:` / `decode:` worker block of a disaggregated `dynamo` service."""

    tensor_parallel_size: int | None = Field(None, ge=1)
    pipeline_parallel_size: int | None = Field(None, ge=1)
    data_parallel_size: int | None = Field(None, ge=1)
    num_nodes: int = Field(1, ge=1)
    num_workers: int = Field(1, ge=1)
    node_pool: str | None = None
    extra_args: list[str] = Field(default_factory=list)
    extra_env: dict[str, str] = Field(default_factory=dict)


ServiceType = Literal["api", "llama_cpp", "vllm", "sglang", "trt_llm", "nim", "docker_model",
                      "dynamo", "gym", "nat", "custom"]
ApiProtocol = Literal["chat_completions", "completions", "responses"]
# Other spellings of a protocol some OpenAI-compatible tools use, read as the canonical one.
_PROTOCOL_ALIASES = {"chat": "chat_completions", "chat_completion": "chat_completions",
                     "completion": "completions", "response": "responses"}
# The docs' cheat sheet writes `nat_agent` where the schema says `nat`.
_TYPE_ALIASES = {"nat_agent": "nat"}

# nel's own keys, valid on every type (they predate the per-type checks).
_NEL_KEYS = frozenset({
    "type", "url", "protocol", "model", "api_key", "api_key_env", "role", "generation",
    "system_prompt", "timeout", "connect_timeout", "max_concurrent", "max_retries",
    "retry_backoff", "headers", "transport", "model_path", "port", "host",
    "tensor_parallel_size", "extra_args", "startup_timeout", "command", "env", "depends_on",
    "node_pool", "pricing",
})
_MODEL_KEYS = _NEL_KEYS | {"proxy", "interceptors", "proxy_verbose", "health_path",
                           "max_input_tokens", "max_output_tokens"}
_SERVER_KEYS = _MODEL_KEYS | {
    "served_model_name", "pipeline_parallel_size", "data_parallel_size", "num_nodes", "gpus",
    "image", "setup_commands", "container_mounts", "pre_cmd", "ray_binary", "reasoning_pattern",
}
_SERVICE_KEYS: dict[str, frozenset[str]] = {
    "api": _MODEL_KEYS,
    "llama_cpp": _SERVER_KEYS, "vllm": _SERVER_KEYS, "sglang": _SERVER_KEYS,
    "trt_llm": _SERVER_KEYS, "nim": _SERVER_KEYS, "docker_model": _SERVER_KEYS,
    "dynamo": _SERVER_KEYS | {"engine", "prefill", "decode"},
    "gym": _NEL_KEYS | {"image", "benchmark", "server_cmd"},
    "nat": _NEL_KEYS | {"image", "nat_config_file"},
    "custom": _NEL_KEYS | {"class_path", "config"},
}
# Service types nel starts itself (nel_resources/services/launch.py).
LAUNCHED_TYPES = frozenset({"llama_cpp", "vllm", "sglang", "trt_llm", "dynamo"})


# Headers nel writes itself from the request (framing, routing): a configured one would be
# sent beside nel's own, and two Host or Content-Length headers make a request ambiguous.
_OWN_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection",
                          "keep-alive", "upgrade", "te", "trailer", "proxy-connection"})


def check_headers(headers: dict[str, str], at: str) -> None:
    """Refuse headers nel sets itself, names given twice, and values that break the line."""
    seen: dict[str, str] = {}
    for name, value in headers.items():
        low = name.strip().lower()
        if low in _OWN_HEADERS:
            raise key_error(f"{at}.{name}", f"header {name!r} is set by nel from the URL and "
                            "the request; remove it from the config")
        if low in seen:
            raise key_error(f"{at}.{name}", f"header {name!r} is given twice (also as "
                            f"{seen[low]!r}); keep one")
        if not name.strip() or any(c in name for c in " :\r\n") or any(
                c in str(value) for c in "\r\n"):
            raise key_error(f"{at}.{name}", f"header {name!r}: a name without spaces or "
                            "colons and a one-line value are needed")
        seen[low] = name


def _service_defaults() -> dict[str, Any]:
    return field_defaults(ServiceConfig)


class ServiceConfig(_Strict):
    """A model endpoint nel calls (`type: api`) or starts itself (llama_cpp, vllm, ...).

    `extra_env` (NeMo Evaluator's spelling) and `env` are one field; generation keys
    written at the service's top level (`temperature: 0`) move into `generation`.
    """

    type: ServiceType = "api"
    url: str | None = None
    protocol: ApiProtocol = "chat_completions"
    model: str | None = None
    api_key: str | None = None
    api_key_env: str | None = None
    role: Literal["model", "judge"] = "model"
    generation: GenerationParams = Field(default_factory=GenerationParams)
    system_prompt: str | None = None
    timeout: float = Field(120.0, gt=0)
    connect_timeout: float = Field(10.0, gt=0)
    max_concurrent: int = Field(64, ge=1, le=4096)
    max_retries: int = Field(5, ge=0, le=50)
    retry_backoff: float = Field(0.5, ge=0)
    headers: dict[str, str] = Field(default_factory=dict)
    transport: Literal["auto", "raw", "aiohttp"] = "auto"
    # Launched services (issue: launched model services)
    model_path: str | None = None
    port: int | None = Field(None, ge=1, le=65535)
    host: str = "127.0.0.1"
    tensor_parallel_size: int = Field(1, ge=1)
    extra_args: list[str] = Field(default_factory=list)
    startup_timeout: float = Field(600.0, gt=0)
    command: list[str] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    # NeMo Evaluator keys: parsed and validated; `check_supported` refuses the ones whose
    # feature nel does not have yet.
    depends_on: list[str] = Field(default_factory=list)
    node_pool: str | None = None
    # nel's own: token prices and a budget cap (config/pricing.py)
    pricing: PricingConfig | None = None
    proxy: ProxyConfig | None = None
    interceptors: list[InterceptorConfig] = Field(default_factory=list)
    proxy_verbose: bool = False
    health_path: str | None = None
    max_input_tokens: int | None = Field(None, gt=0)
    max_output_tokens: int | None = Field(None, gt=0)
    served_model_name: str | None = None
    pipeline_parallel_size: int | None = Field(None, ge=1)
    data_parallel_size: int | None = Field(None, ge=1)
    num_nodes: int = Field(1, ge=1)
    gpus: list[int] | int | None = None
    image: str | None = None
    setup_commands: list[str] = Field(default_factory=list)
    container_mounts: list[str] = Field(default_factory=list)
    pre_cmd: str | None = None
    ray_binary: str = "ray"
    reasoning_pattern: str | None = None
    engine: Literal["sglang"] = "sglang"
    prefill: DynamoWorkerConfig | None = None
    decode: DynamoWorkerConfig | None = None
    benchmark: str | None = None
    server_cmd: str | None = None
    nat_config_file: str | None = None
    class_path: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if data.get("type") in _TYPE_ALIASES:
            data["type"] = _TYPE_ALIASES[data["type"]]
        if isinstance(data.get("protocol"), str):
            data["protocol"] = _PROTOCOL_ALIASES.get(data["protocol"], data["protocol"])
        check_type_keys({k: v for k, v in data.items() if k not in _GEN_KEYS and k != "extra_env"},
                        "a service", _SERVICE_KEYS, "api", _service_defaults())
        if "extra_env" in data:
            extra = data.pop("extra_env")
            if "env" in data and data["env"] != extra:
                raise key_error("extra_env", "give `extra_env` or `env`, not both (they are "
                                "the same setting; write `extra_env`)")
            data["env"] = extra
        if data.get("served_model_name") and data.get("type") in LAUNCHED_TYPES:
            # NeMo Evaluator: `model` is what the server loads, `served_model_name` the name
            # it answers to. nel's spelling: `model_path` loads, `model` is the API name.
            data.setdefault("model_path", data.get("model"))
            data["model"] = data["served_model_name"]
        # Accept generation keys at the service's top level too (`temperature: 0`).
        if any(k in data for k in _GEN_KEYS):
            gen = dict(data.get("generation") or {})
            for k in _GEN_KEYS:
                if k in data:
                    gen[k] = data.pop(k)
            data["generation"] = gen
        return data

    @model_validator(mode="after")
    def _check(self) -> ServiceConfig:
        if self.url is not None and self.type in ("api", "gym") and not self.url.startswith(
                ("http://", "https://")):
            raise key_error("url", f"url must start with http:// or https:// (got "
                            f"{redact_url(self.url)!r})")
        if self.url is not None and self.url.startswith(("http://", "https://")):
            problem = url_problem(self.url)  # refused here, never looked up
            if problem:
                raise key_error("url", problem)
        if self.model is not None and not self.model.strip():
            raise key_error("model", "model is empty; give the model name the endpoint "
                            "serves, or leave the key out")
        check_headers(self.headers, "headers")
        if self.proxy is not None:
            check_headers(self.proxy.extra_headers, "proxy.extra_headers")
        if self.type == "custom" and not self.class_path:
            raise key_error("class_path", "a `type: custom` service needs `class_path`")
        if (self.prefill is None) != (self.decode is None):
            raise key_error("prefill" if self.prefill is None else "decode",
                            "a disaggregated dynamo service needs both `prefill` and `decode`")
        return self

    def resolved_api_key(self) -> str | None:
        """The API key, read from `api_key_env` when set (the variable must exist)."""
        if self.api_key_env:
            val = os.environ.get(self.api_key_env)
            if val is None:
                raise ConfigError(
                    f"environment variable {self.api_key_env} (api_key_env) is not set; "
                    f"export {self.api_key_env}=<your key>"
                )
            return val
        return self.api_key

    def resolved_headers(self) -> dict[str, str]:
        """The extra request headers, with `${VAR}` references expanded now."""
        from nel_resources.config.loading import expand_env

        return {
            k: expand_env(v, where=f"header {k}") if "${" in v else v
            for k, v in self.headers.items()
        }

