"""Answers that try to score without passing the tests: each one ends the program with
status 0 before (or instead of) the tests, or tries to forge the harness's sentinel. Every
one defines `entry_point` wrongly, so only a harness fooled by it could score it 1."""

from __future__ import annotations

_PRELUDES = {
    "sys_exit": "import sys\nsys.exit(0)\n",
    "os_exit": "import os\nos._exit(0)\n",
    "raise_system_exit": "raise SystemExit(0)\n",
    # the tests fail, then an exit hook turns the status into 0
    "atexit_exit_0": "import atexit, os\natexit.register(lambda: os._exit(0))\n",
    # everything the program can see of its own text, printed before leaving with 0
    "print_own_source": ("import sys\nf = sys._getframe()\n"
                         "for c in f.f_code.co_consts:\n    print(c)\n"
                         "print(open('/proc/self/cmdline', 'rb').read().decode(errors='replace'))\n"
                         "sys.stdout.flush()\nsys.exit(0)\n"),
    "fake_sentinel": ("print('nel-tests-done-' + '0' * 32)\nprint('OK')\nimport os\nos._exit(0)\n"),
    "read_stdin": "import sys\nprint(sys.stdin.read())\nsys.stdout.flush()\nimport os\nos._exit(0)\n",
    # replace what a harness might print with, and the builtins, then leave quietly
    "patch_print_and_write": ("import builtins, os, sys\n"
                              "builtins.print = lambda *a, **k: None\n"
                              "os.write = lambda fd, data: len(data)\n"
                              "sys.stdout = open(os.devnull, 'w')\n"
                              "import atexit\natexit.register(os._exit, 0)\n"),
    # the harness's own channels: every open file descriptor (without blocking), the parent's
    # through /proc, and the parent's memory
    "hunt_descriptors": ("import os\nfor fd in range(64):\n    try:\n"
                         "        os.set_blocking(fd, False)\n        print(os.read(fd, 1 << 16))\n"
                         "    except OSError:\n        pass\n"
                         "for path in ('/proc/%d/fd/0' % os.getppid(), '/proc/%d/environ' % os.getppid()):\n"
                         "    try:\n        print(open(path, 'rb').read())\n    except OSError:\n        pass\n"
                         "import sys\nsys.stdout.flush()\nos._exit(0)\n"),
    # walk up to whatever called the answer and print every string it holds
    "walk_frames": ("import sys\nf = sys._getframe()\nwhile f is not None:\n"
                    "    for v in list(f.f_locals.values()) + list(f.f_globals.values()):\n"
                    "        print(repr(v)[:200])\n    f = f.f_back\n"
                    "sys.stdout.flush()\nimport os\nos._exit(0)\n"),
    # stop the process that runs the tests
    "kill_the_tests": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
}

#: An answer whose value claims to equal anything: only plain data crosses to the tests.
ALWAYS_EQUAL = ("class Anything:\n    def __eq__(self, other):\n        return True\n"
                "    __hash__ = object.__hash__\n")

ATTACKS = sorted(_PRELUDES)


def always_equal_answer(entry_point: str) -> str:
    """A fenced answer whose function returns an object equal to everything."""
    return (f"```python\n{ALWAYS_EQUAL}\n\ndef {entry_point}(*args, **kwargs):\n"
            "    return Anything()\n```")


def attack_answer(name: str, entry_point: str) -> str:
    """A fenced answer: the attack at the top, then a wrong `entry_point`."""
    return (f"```python\n{_PRELUDES[name]}\n\ndef {entry_point}(*args, **kwargs):\n"
            "    return None\n```")
