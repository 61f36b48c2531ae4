"""nel's Tavily `web_search` plugin for OpenClaw (JavaScript; loaded by `plugins.load.paths`).

`PLUGIN_DIR` is the directory OpenClaw loads it from (`openclaw_home` writes it into each
sample's config with the search relay's URL).
"""

from pathlib import Path

PLUGIN_DIR = Path(__file__).resolve().parent
