"""The harness a code answer's tests run in: the tests in one process, the answer in another.

A pass must mean the tests ran to their end and passed. A harness that runs the answer and
the tests in one process cannot promise that: whatever the harness knows (a sentinel to print
after the last assertion, the pipe it came through, the frame that holds it), the answer can
find too, and then print it and leave with status 0 before the tests ran. So the two are
kept apart:

- The *test process* (`python3 -I -c TEST_SIDE`, trusted) reads everything from stdin at once:
  the prompt (the dataset's: it defines the helpers the tests call), the answer module, the
  tests, the entry point and the run's sentinel. It makes itself non-dumpable (so no other
  process of the same user can read its memory or file descriptors through /proc), starts the
  answer process, runs the tests with `candidate` standing for the answer's function, and
  prints the sentinel only when the tests returned.
- The *answer process* (`python3 -I -c ANSWER_SIDE`, a fresh interpreter: nothing of the test
  process's memory) gets the answer module and serves calls of its entry point. Its stdout and
  stderr go to the test process's stderr, never to the stdout the verdict reads.

Values cross between them as Python literals (`repr`, then `ast.literal_eval`, which runs no
code): None, bools, numbers, strings, bytes, lists, tuples, dicts and sets, with inf and nan
(tagged, as are sets, which `repr` writes as calls).
An answer returning anything else (an object whose `__eq__` always says yes) fails the call.
An answer that exits, kills its process or the test process, or answers garbage fails the run.
"""

from __future__ import annotations

import json

__all__ = ["ANSWER_SIDE", "HARNESS_CMD", "TEST_SIDE", "harness_input"]

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

#: The answer process: reads the module, then calls of the entry point, on the fd in argv[1];
#: answers on the fd in argv[2].
ANSWER_SIDE = _CODEC + r"""
import os, sys
_inbox = os.fdopen(int(sys.argv[1]), "rb")
_out = int(sys.argv[2])
wr = os.write
def _line():
    line = _inbox.readline()
    if not line.endswith(b"\n"):
        os._exit(3)
    return line[:-1]
def _block(n):
    data = _inbox.read(n)
    if len(data) != n:
        os._exit(3)
    return data
def _send(kind, value):
    data = _encode((kind, value))
    while data:
        data = data[wr(_out, data):]
def _main():
    entry = _line().decode()
    src = _block(int(_line()))
    main = {"__name__": "__main__", "__builtins__": __builtins__}  # the answer's own module
    try:
        exec(compile(src, "<answer>", "exec"), main)
        fn = main[entry]
    except BaseException as e:
        import traceback
        traceback.print_exc()
        _send("load_error", type(e).__name__)
        os._exit(4)
    _send("ready", None)
    while True:
        args, kwargs = _decode(_line())
        try:
            result = fn(*args, **kwargs)
            _plain(result)
            out = ("ok", result)
        except BaseException as e:
            out = ("raise", (type(e).__name__, str(e)[:500]))
        _send(*out)
_main()
"""

#: The test process: everything from stdin, the answer process started, the tests run.
TEST_SIDE = _CODEC + r"""
def _nel_tests():
    import json, os, subprocess, sys
    read, write = os.read, os.write
    try:
        import ctypes
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0: /proc/<pid>/{mem,fd} closed
    except Exception:
        pass
    data = bytearray()
    while True:
        chunk = read(0, 1 << 16)
        if not chunk:
            break
        data += chunk
    head, _, rest = bytes(data).partition(b"\n")
    sizes = json.loads(head)
    parts, at = {}, 0
    for name in ("prompt", "answer", "tests", "sentinel"):
        parts[name] = rest[at:at + sizes[name]]
        at += sizes[name]
    entry, answer_side = sizes["entry"], sizes["answer_side"]
    to_answer_r, to_answer_w = os.pipe()
    from_answer_r, from_answer_w = os.pipe()
    child = subprocess.Popen(
        [sys.executable, "-I", "-c", answer_side, str(to_answer_r), str(from_answer_w)],
        stdin=subprocess.DEVNULL, stdout=2, stderr=2, pass_fds=(to_answer_r, from_answer_w),
        close_fds=True)
    os.close(to_answer_r)
    os.close(from_answer_w)
    inbox = os.fdopen(from_answer_r, "rb")
    def send(data):
        while data:
            data = data[write(to_answer_w, data):]
    def receive():
        line = inbox.readline()
        if not line.endswith(b"\n"):
            raise AnswerProcessExited("the answer's process ended (status %s)" % child.wait())
        kind, value = _decode(line)
        return kind, value
    import builtins
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
    send(entry.encode() + b"\n" + str(len(parts["answer"])).encode() + b"\n" + parts["answer"])
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
        exec(compile(parts["prompt"], "<prompt>", "exec"), ns)
    except SyntaxError:
        pass  # a prompt that is not a whole module: the tests get no helpers from it
    ns[entry] = candidate
    exec(compile(parts["tests"], "<tests>", "exec"), ns)
    exec(compile("check(%s)\n" % entry, "<check>", "exec"), ns)
    child.kill()
    child.wait()
    sys.stdout.flush()
    write(1, b"\n" + parts["sentinel"])
_nel_tests()
"""

#: The command a code answer's tests run with inside a sandbox (isolated mode: no user site,
#: no PYTHON* variables, no script directory on sys.path).
HARNESS_CMD = ["python3", "-I", "-c", TEST_SIDE]


def harness_input(*, prompt: str, answer: str, tests: str, entry_point: str,
                  sentinel: str) -> bytes:
    """What `HARNESS_CMD` reads on stdin: a JSON line of sizes, then the prompt, the answer
    module (prompt and the model's completion), the tests and the sentinel.

    The sentinel never reaches the answer's process: it is a fresh interpreter that gets the
    answer module alone, over its own pipe.
    """
    parts = {"prompt": prompt.encode(), "answer": answer.encode(), "tests": tests.encode(),
             "sentinel": sentinel.encode()}
    head = {name: len(data) for name, data in parts.items()}
    head.update(entry=entry_point, answer_side=ANSWER_SIDE)
    return json.dumps(head).encode() + b"\n" + b"".join(parts.values())
