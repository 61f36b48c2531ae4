"""Endpoint URLs: host validation, and the credentials a URL may carry.

A URL such as `http://user:key@host/v1?api-key=KEY` carries credentials in two places. nel
sends them as the user meant (the user-info as HTTP Basic auth, the query string on every
request) and writes the URL only with both redacted. A host that cannot exist
(`256.1.1.1`, `bad_host-.`) is refused before any lookup is attempted.
"""

from __future__ import annotations

import base64
import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

__all__ = ["EndpointURL", "host_problem", "redact_url", "split_url", "url_secrets"]

_LABEL_RE = re.compile(r"^[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?$")
_REDACTED = "<redacted>"


def host_problem(host: str) -> str | None:
    """Why `host` (a URL's host, IPv6 without brackets) cannot be looked up, or None.

    Dotted all-numeric names are IPv4 literals and must be valid ones (no octet above 255,
    no leading zeros); anything else must be a syntactically valid DNS name (labels of up
    to 63 letters, digits, `-` or `_`, not starting or ending with `-`; 253 characters in
    all). `_` is allowed: Docker and Compose service names use it.
    """
    if not host:
        return "the URL has no host"
    if ":" in host:
        try:
            ipaddress.IPv6Address(host.split("%", 1)[0])
        except ValueError:
            return f"{host!r} is not a valid IPv6 address"
        return None
    name = host[:-1] if host.endswith(".") else host
    if re.fullmatch(r"[0-9.]+", name) or re.fullmatch(r"0[xX][0-9a-fA-F.]*", name):
        try:
            ipaddress.IPv4Address(name)
        except ValueError:
            return f"{host!r} is not a valid IPv4 address (four numbers 0-255)"
        return None
    if len(name) > 253:
        return f"host name {host[:40]!r}... is longer than 253 characters"
    for label in name.split("."):
        if not _LABEL_RE.match(label):
            return (f"{host!r} is not a valid host name (labels of letters, digits, '-' "
                    "and '_', 1-63 characters, not starting or ending with '-')")
    return None


def url_problem(url: str) -> str | None:
    """Why an http(s) endpoint URL cannot work (bad host, bad port), or None."""
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError when out of range or not a number
    except ValueError as exc:
        return f"{url_for_humans(url)!r} is not a valid URL ({exc})"
    del port
    host = parts.hostname or ""
    problem = host_problem(host)
    return f"{problem} in {url_for_humans(url)!r}" if problem else None


@dataclass(frozen=True)
class EndpointURL:
    """A URL split into what is connected to and the credentials it carries."""

    base: str
    """The URL without user-info and query string (the Host header comes from it)."""
    query: str
    """The query string (without `?`), sent on every request; '' if none."""
    basic_auth: str | None
    """`Basic <base64 user:password>` from the user-info, or None."""


def split_url(url: str) -> EndpointURL:
    """Split off the user-info (as an HTTP Basic credential) and the query string."""
    parts = urlsplit(url)
    auth = None
    if parts.username is not None or parts.password is not None:
        user = unquote(parts.username or "")
        password = unquote(parts.password or "")
        auth = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    netloc = parts.netloc.rsplit("@", 1)[-1]
    base = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    return EndpointURL(base=base, query=parts.query, basic_auth=auth)


def url_secrets(url: str | None) -> set[str]:
    """Credential strings inside a URL: the user-info's password (and the user-info, raw and
    decoded) and every query-string value, for the `Redactor`."""
    if not url:
        return set()
    try:
        parts = urlsplit(url)
    except ValueError:
        return set()
    out: set[str] = set()
    if "@" in parts.netloc:
        userinfo = parts.netloc.rsplit("@", 1)[0]
        out.add(userinfo)
        out.add(unquote(userinfo))
        if parts.password:
            out.update({parts.password, unquote(parts.password)})
        split = split_url(url)
        if split.basic_auth:
            out.add(split.basic_auth.split(" ", 1)[1])
    for _, value in parse_qsl(parts.query, keep_blank_values=False):
        out.update({value, quote(value, safe="")})
    return {s for s in out if s}


def redact_url(url: str) -> str:
    """`url` with its user-info and every query-string value replaced by `<redacted>`."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    netloc = parts.netloc
    if "@" in netloc:
        netloc = f"{_REDACTED}@{netloc.rsplit('@', 1)[1]}"
    query = parts.query
    if query:
        query = urlencode([(k, _REDACTED) for k, _ in parse_qsl(query, keep_blank_values=True)],
                          safe="<>")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def url_for_humans(url: str) -> str:
    """The URL as shown in messages: with its credentials redacted."""
    return redact_url(url)
