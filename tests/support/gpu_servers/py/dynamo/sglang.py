"""`python -m dynamo.sglang ...`: the stand-in of tests/support/gpu_servers/dynamo_stand_in.py."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from dynamo_stand_in import TOOLS

if __name__ == "__main__":
    TOOLS["sglang"](sys.argv[1:])
