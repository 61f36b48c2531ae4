"""Reading a config file's bytes and YAML structure within bounds, one line per refusal.

A config is read exactly once (a `<(cat cfg)` pipe has no second reading), from a regular
file or a pipe only: a device such as /dev/zero never ends, a socket or a FIFO without a
writer never answers. Its size, nesting depth and alias expansion are bounded before
PyYAML's recursive composer or `safe_load` could run out of stack or memory.
"""

from __future__ import annotations

import os
import select
import stat
import time
from pathlib import Path

import yaml

from nel_resources.config._base import ConfigError

MAX_CONFIG_BYTES = 1_000_000
# Values a config may expand to through YAML aliases (a "billion laughs" file expands a
# few lines into billions).
MAX_YAML_NODES = 100_000
# Nested mappings/sequences a config may have: real configs stay under ~10; PyYAML's
# composer recurses per level and overflows Python's stack near 1,000.
MAX_YAML_DEPTH = 100
# Seconds a pipe may stay silent before nel stops waiting for the rest of the config.
PIPE_IDLE_TIMEOUT = 10.0

_KINDS = {stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
          stat.S_IFSOCK: "a socket"}


def _too_big(p: Path, size: int | str) -> ConfigError:
    shown = f"{size:,}" if isinstance(size, int) else size
    return ConfigError(f"{p}: {shown} bytes is not a config (the limit is "
                       f"{MAX_CONFIG_BYTES:,}); check the path")


def _read_regular(fd: int, p: Path, size: int) -> bytes:
    if size > MAX_CONFIG_BYTES:
        raise _too_big(p, size)
    chunks: list[bytes] = []
    total = 0
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
        total += len(chunk)
        if total > MAX_CONFIG_BYTES:  # the file grew while being read
            raise _too_big(p, f"more than {MAX_CONFIG_BYTES:,}")
    return b"".join(chunks)


def _read_pipe(fd: int, p: Path) -> bytes:
    """A pipe or FIFO read to its end, bounded in size and in idle time.

    The descriptor is non-blocking: a FIFO nobody writes to (where a plain `open` would
    block forever, and `poll` reports nothing) times out with one line instead of hanging.
    """
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP)
    chunks: list[bytes] = []
    total = 0
    deadline = time.monotonic() + PIPE_IDLE_TIMEOUT
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise ConfigError(f"{p}: nothing more was written to this pipe within "
                              f"{PIPE_IDLE_TIMEOUT:g} s; give a config file, or write the whole "
                              "config into the pipe")
        if not poller.poll(left * 1000):
            continue
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            continue
        if not chunk:  # every writer closed its end
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > MAX_CONFIG_BYTES:
            raise _too_big(p, f"more than {MAX_CONFIG_BYTES:,}")
        deadline = time.monotonic() + PIPE_IDLE_TIMEOUT


def read_config_bytes(p: Path) -> bytes:
    """The bytes of a config file or pipe, read once; ConfigError (one line) otherwise."""
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {p}") from None
    except IsADirectoryError:
        raise ConfigError(f"config path {p} is a directory; give the YAML file inside it") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config {p}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            raise ConfigError(f"config path {p} is a directory; give the YAML file inside it")
        if stat.S_ISREG(mode):
            os.set_blocking(fd, True)
            return _read_regular(fd, p, st.st_size)
        if stat.S_ISFIFO(mode):
            return _read_pipe(fd, p)
        kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise ConfigError(f"{p} is {kind}, not a config file; give a YAML file (or a pipe)")
    except OSError as exc:
        raise ConfigError(f"cannot read config {p}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read_config_text(p: Path) -> str:
    """The text of a config file, read once, refusing what cannot be one in one line each."""
    raw = read_config_bytes(p)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{p}: byte {exc.start} is not UTF-8 (a binary or UTF-16 file?); save the config "
            "as UTF-8 text"
        ) from None
    if "\x00" in text:
        raise ConfigError(f"{p}: contains NUL bytes (a binary file?); a config is YAML text")
    return text.removeprefix("\ufeff")


def check_yaml_depth(text: str, where: str) -> None:
    """Refuse YAML nested deeper than `MAX_YAML_DEPTH` before anything composes it.

    PyYAML's event parser is iterative; its composer and constructor recurse per level, so
    the depth is counted on the event stream first.
    """
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark else "?"
                raise ConfigError(f"{where}:{line}: the YAML is nested more than "
                                  f"{MAX_YAML_DEPTH} levels deep; a config is not")
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def check_yaml_size(root: yaml.Node, where: str) -> None:
    """Refuse recursive aliases and alias bombs before `safe_load` expands them.

    Counted on the composed node graph, where an alias is a shared node: linear time.
    """
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def children(node: yaml.Node) -> list[yaml.Node]:
        if isinstance(node, yaml.MappingNode):
            return [n for pair in node.value for n in pair]
        if isinstance(node, yaml.SequenceNode):
            return list(node.value)
        return []

    # Iterative post-order walk: a deep document must not hit Python's recursion limit.
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            active.discard(key)
            total = 1 + sum(sizes[id(c)] for c in children(node))
            if total > MAX_YAML_NODES:
                raise ConfigError(
                    f"{where}:{node.start_mark.line + 1}: YAML aliases expand this config to "
                    f"more than {MAX_YAML_NODES:,} values; write the values out instead"
                )
            sizes[key] = total
            continue
        if key in sizes:
            continue
        if key in active:
            raise ConfigError(
                f"{where}:{node.start_mark.line + 1}: a YAML alias refers to a value that "
                "contains it (recursive alias); write the value out instead"
            )
        active.add(key)
        stack.append((node, True))
        stack.extend((c, False) for c in children(node) if id(c) not in sizes)
