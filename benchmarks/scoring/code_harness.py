"""The harness a code answer's tests run in: the tests in one process, the answer in another.

A pass must mean the tests ran to their end and passed. A harness that runs the answer and
the tests in one process cannot promise that: whatever the harness knows (a sentinel to print
after the last assertion, the pipe it came through, the frame that holds it), the answer can
find too, and then print it and leave with status 0 before the tests ran. So the two are
kept apart:

- The *test process* (`python3 -I -c HARNESS`, trusted) reads its stdin in order: the
  prompt (the dataset's: it defines the helpers the tests call) and the answer module, then,
  only after the answer's process exists, the tests and the run's sentinel. It makes itself
  non-dumpable (so no other process of the same user can read its memory or file descriptors
  through /proc), runs the tests with `candidate` standing for the answer's function, and
  prints the sentinel only when the tests returned.
- The *answer process* is forked from it before the tests and the sentinel are read (so
  neither is in its memory), drops the stdin pipe they wait in before any answer code runs,
  loads the answer module and serves calls of its entry point. Its stdout goes to the test
  process's stderr, never to the stdout the verdict reads. (A fork, not a second interpreter:
  an interpreter's start was most of what the harness cost; `bench/bench_code_harness.py`.)

Values cross between them as Python literals (`repr`, then `ast.literal_eval`, which runs no
code): None, bools, numbers, strings, bytes, lists, tuples, dicts and sets, with inf and nan
(tagged, as are sets, which `repr` writes as calls).
An answer returning anything else (an object whose `__eq__` always says yes) fails the call.
An answer that exits, kills its process or the test process, or answers garbage fails the run.
"""

from __future__ import annotations

import json

__all__ = ["HARNESS", "HARNESS_CMD", "harness_input"]

#: Both sides: values as Python literals, with inf and nan (which `repr` does not write as
#: literals) tagged; anything but plain data is refused.
_CODEC = r"""
import ast, math
def _plain(x):
    if x is None or type(x) in (bool, int, str, bytes, complex):
        return x
    if type(x) is float:
        return x if math.isfinite(x) else ("__nel_float__", repr(x))
    if type(x) in (list, tuple):
        return type(x)(_plain(v) for v in x)
    if type(x) in (set, frozenset):  # `set()` and `frozenset(...)` are calls, not literals
        return ("__nel_" + type(x).__name__ + "__", [_plain(v) for v in x])
    if type(x) is dict:
        return {_plain(k): _plain(v) for k, v in x.items()}
    raise TypeError("a value of type %s cannot be compared by the tests" % type(x).__name__)
def _real(x):
    if type(x) is tuple and len(x) == 2 and x[0] == "__nel_float__":
        return float(x[1])
    if type(x) is tuple and len(x) == 2 and x[0] in ("__nel_set__", "__nel_frozenset__"):
        return (set if x[0] == "__nel_set__" else frozenset)(_real(v) for v in x[1])
    if type(x) in (list, tuple):
        return type(x)(_real(v) for v in x)
    if type(x) is dict:
        return {_real(k): _real(v) for k, v in x.items()}
    return x
def _encode(value):
    return repr(_plain(value)).encode() + b"\n"
def _decode(line):
    return _real(ast.literal_eval(line.decode()))
"""

#: The harness, run as `python3 -I -c HARNESS`. `_answer` is the answer's process: forked
#: after the test process has read the prompt and the answer module and before it reads the
#: tests and the sentinel, so neither is in its memory; it drops the stdin pipe they are still
#: in before any answer code runs. A fork costs far less than a second interpreter's start.
HARNESS = _CODEC + r"""
def _answer(inbox, out, entry, src):
    import os
    # Taken before the answer runs: an answer that replaces os.write (or os._exit) in its own
    # process must not hang the exchange until the sandbox's timeout.
    write, leave = os.write, os._exit
    def send(kind, value):
        data = _encode((kind, value))
        while data:
            data = data[write(out, data):]
    main = {"__name__": "__main__", "__builtins__": __builtins__}  # the answer's own module
    try:
        exec(compile(src, "<answer>", "exec"), main)
        fn = main[entry]
    except BaseException as e:
        import traceback
        traceback.print_exc()
        send("load_error", type(e).__name__)
        leave(4)
    send("ready", None)
    while True:
        line = inbox.readline()
        if not line.endswith(b"\n"):
            leave(3)
        args, kwargs = _decode(line)
        try:
            result = fn(*args, **kwargs)
            _plain(result)
            out_msg = ("ok", result)
        except BaseException as e:
            out_msg = ("raise", (type(e).__name__, str(e)[:500]))
        send(*out_msg)

def _nel_tests():
    import builtins, json, os, sys
    read, write = os.read, os.write
    try:
        import ctypes
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: /proc/<pid>/{mem,fd} closed
    except Exception:
        pass
    def take(n):
        data = bytearray()
        while len(data) < n:
            chunk = read(0, min(1 << 16, n - len(data)))
            if not chunk:
                raise EOFError("the harness's input ended early")
            data += chunk
        return bytes(data)
    head = bytearray()
    while not head.endswith(b"\n"):
        head += take(1)
    sizes = json.loads(head)
    entry = sizes["entry"]
    prompt, answer = take(sizes["prompt"]), take(sizes["answer"])
    to_answer_r, to_answer_w = os.pipe()
    from_answer_r, from_answer_w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        try:
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)  # the tests and the sentinel wait in the old stdin: gone
            os.dup2(2, 1)  # the answer's prints go to stderr, never to the verdict's stdout
            os.close(to_answer_w)
            os.close(from_answer_r)
            sys.stdin = open(os.devnull)
            _answer(os.fdopen(to_answer_r, "rb"), from_answer_w, entry, answer)
        finally:
            os._exit(3)
    os.close(to_answer_r)
    os.close(from_answer_w)
    tests, sentinel = take(sizes["tests"]), take(sizes["sentinel"])
    inbox = os.fdopen(from_answer_r, "rb")
    def status():
        try:
            return os.waitpid(pid, 0)[1]
        except ChildProcessError:
            return None
    def send(data):
        while data:
            data = data[write(to_answer_w, data):]
    def receive():
        line = inbox.readline()
        if not line.endswith(b"\n"):
            raise AnswerProcessExited("the answer's process ended (status %s)" % status())
        return _decode(line)
    def named(name):
        # The answer's exception as the tests know it: a built-in one as itself (a test may
        # expect `ValueError`), anything else as an Exception printed `<name>: ...` on the
        # traceback's last line, which the verdict classifies a run by. Never SystemExit.
        real = getattr(builtins, str(name), None)
        if isinstance(real, type) and issubclass(real, Exception):
            return real
        cls = type(name if str(name).isidentifier() else "AnswerError", (Exception,), {})
        cls.__module__ = "builtins"
        return cls
    AnswerProcessExited = named("AnswerExit")
    kind, value = receive()
    if kind == "load_error" and value in ("SystemExit", "KeyboardInterrupt", "GeneratorExit"):
        raise AnswerProcessExited("the answer left with %s before the tests ran" % value)
    if kind != "ready":
        raise named(value)("the answer did not load")
    def candidate(*args, **kwargs):
        send(_encode((args, kwargs)))
        kind, value = receive()
        if kind == "ok":
            return value
        if kind == "raise":
            raise named(value[0])(value[1])
        raise AnswerProcessExited("the answer's process sent %r" % kind)
    candidate.__name__ = entry
    ns = {"__name__": "__nel_tests__"}
    try:
        exec(compile(prompt, "<prompt>", "exec"), ns)
    except SyntaxError:
        pass  # a prompt that is not a whole module: the tests get no helpers from it
    ns[entry] = candidate
    exec(compile(tests, "<tests>", "exec"), ns)
    exec(compile("check(%s)\n" % entry, "<check>", "exec"), ns)
    os.kill(pid, 9)
    status()
    sys.stdout.flush()
    write(1, b"\n" + sentinel)
_nel_tests()
"""

#: The command a code answer's tests run with inside a sandbox (isolated mode: no user site,
#: no PYTHON* variables, no script directory on sys.path).
HARNESS_CMD = ["python3", "-I", "-c", HARNESS]


def harness_input(*, prompt: str, answer: str, tests: str, entry_point: str,
                  sentinel: str) -> bytes:
    """What `HARNESS_CMD` reads on stdin: a JSON line of sizes, then the prompt, the answer
    module (prompt and the model's completion), the tests and the sentinel.

    The tests and the sentinel come last: the answer's process is forked before the harness
    reads them, so they never reach its memory.
    """
    parts = {"prompt": prompt.encode(), "answer": answer.encode(), "tests": tests.encode(),
             "sentinel": sentinel.encode()}
    head: dict[str, object] = {name: len(data) for name, data in parts.items()}
    head["entry"] = entry_point
    return json.dumps(head).encode() + b"\n" + b"".join(parts.values())
