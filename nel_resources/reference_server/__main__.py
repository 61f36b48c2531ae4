"""`python -m nel_resources.reference_server`, or this file run by path (what
`start_reference_server` does, with `-P`)."""

import sys

if not __package__:
    # Run by path: import the package from the checkout this file is in, not whichever
    # nel the interpreter would find first.
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from nel_resources.reference_server.cli import main

if __name__ == "__main__":
    sys.exit(main())
