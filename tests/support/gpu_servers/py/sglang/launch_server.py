"""`python -m sglang.launch_server ...`: the stand-in of tests/support/gpu_servers/stand_in.py."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from stand_in import main

if __name__ == "__main__":
    main("sglang", sys.argv[1:])
