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
}

ATTACKS = sorted(_PRELUDES)


def attack_answer(name: str, entry_point: str) -> str:
    """A fenced answer: the attack at the top, then a wrong `entry_point`."""
    return (f"```python\n{_PRELUDES[name]}\n\ndef {entry_point}(*args, **kwargs):\n"
            "    return None\n```")
