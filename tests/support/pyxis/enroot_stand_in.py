"""`enroot import [-a|--arch ARCH] [-o|--output PATH] [--] URI` (NVIDIA enroot's command
line); writes squashfs's magic and the URI instead of the image's layers."""

from __future__ import annotations

import json
import os
import re
import sys

SCHEMES = ("docker://", "dockerd://", "podman://")
# docker://[USER@][REGISTRY#]IMAGE[:TAG]
URI_RE = re.compile(r"^(docker|dockerd|podman)://([^@/]+@)?([^#]+#)?[a-z0-9][a-z0-9._/-]*(:[\w.-]+)?$")


def fail(msg: str) -> None:
    print(f"[ERROR] {msg}", file=sys.stderr)
    sys.exit(1)


def main(argv: list[str]) -> None:
    if not argv or argv[0] != "import":
        fail("Usage: enroot import [options] [--] URI (only `import` is stood in)")
    args, output, arch, uri = argv[1:], None, None, None
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            uri = args[i + 1] if i + 1 < len(args) else None
            break
        if a in ("-o", "--output"):
            output, i = args[i + 1], i + 2
        elif a in ("-a", "--arch"):
            arch, i = args[i + 1], i + 2
        elif a.startswith("-"):
            fail(f"Invalid option: {a}")
        else:
            uri, i = a, i + 1
    if not uri or not URI_RE.match(uri):
        fail(f"Invalid image reference: {uri}")
    if output is None:
        output = re.sub(r"[/:#]", "+", uri.split("://", 1)[1]) + ".sqsh"
    if os.path.exists(output):
        fail(f"File already exists: {output}")
    with open(output, "wb") as f:
        f.write(b"hsqs" + json.dumps({"uri": uri, "arch": arch}).encode())
    print(f"[INFO] Created squashfs image {output}")


if __name__ == "__main__":
    main(sys.argv[1:])
