"""Real Dagster processes for end-to-end tests: webserver, daemon, GraphQL, headless Chromium.

Every process is a `ManagedProcess` (own session, default signal dispositions, stopped as a
process group), so the code servers and run workers the webserver or daemon fork are
stopped with them. GraphQL goes through `http_json` (http.client never reads *_proxy
variables), and only 127.0.0.1 is ever a target.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nel_resources.runtime.processes import (
    ManagedProcess,
    start_on_free_port,
)
from tests.support.cli import nel_env
from tests.support.realcomponents import REPO_ROOT, require_real_component
from tests.support.reference import http_json
from tests.support.waiting import PROCESS_START_S, UI_ACTION_MS, wait_for

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Locator, Page

CHROMIUM = "/usr/bin/chromium"
#: The flags every browser test here uses: no sandbox (containers), and nothing that phones
#: home (updates, sync, QUIC), since only 127.0.0.1 may be contacted.
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
#: Run statuses after which a run will not change any more.
FINISHED = frozenset({"SUCCESS", "FAILURE", "CANCELED"})
MODULE = "dagster_project.definitions"


def dagster_env(home: Path, config: Path, data_dir: Path) -> dict[str, str]:
    """Environment for a Dagster process on `home` showing the graph of `config`."""
    return nel_env({"DAGSTER_HOME": str(home), "NEL_CONFIG": str(config), "NEL_DATA_DIR": str(data_dir)})


def _exe(name: str) -> str:
    """A console script of this venv (next to the interpreter), e.g. `dagster-webserver`."""
    return str(Path(sys.executable).with_name(name))


def graphql(base_url: str, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    """POST one GraphQL query to the webserver; returns `data` (fails on errors)."""
    status, _, body = http_json("POST", f"{base_url}/graphql", {"query": query, "variables": variables or {}},
                                timeout=60)
    assert status == 200 and isinstance(body, dict), (status, body)
    assert not body.get("errors"), body["errors"]
    return body["data"]


_ASSET_READY = """
query Ready($keys: [AssetKeyInput!]) { assetNodes(assetKeys: $keys) { assetKey { path } } }
"""


@contextmanager
def running_webserver(home: Path, config: Path, data_dir: Path, log_path: Path, *,
                      ready_asset: list[str], timeout: float = PROCESS_START_S,
                      attempts: int = 3) -> Iterator[tuple[ManagedProcess, str]]:
    """`dagster-webserver` on a free port; yields (process, base URL) once `ready_asset` is
    visible over GraphQL (the code location loaded), and stops its process group on exit.

    The port is picked before the webserver binds it; if another process takes it in
    between the webserver exits at once and we retry on a fresh port.
    """
    proc, port = start_on_free_port(
        lambda p: ManagedProcess(
            [_exe("dagster-webserver"), "-m", MODULE, "-h", "127.0.0.1", "-p", str(p)],
            env=dagster_env(home, config, data_dir), cwd=REPO_ROOT, log_path=log_path,
            name="dagster-webserver"),
        lambda p: f"http://127.0.0.1:{p}/server_info", timeout=timeout, attempts=attempts)
    base = f"http://127.0.0.1:{port}"
    try:
        # /server_info answers before the code server has loaded the definitions.
        wait_for(lambda: graphql(base, _ASSET_READY, {"keys": [{"path": ready_asset}]})["assetNodes"],
                 timeout=timeout, what=f"asset {'/'.join(ready_asset)} in the webserver", alive=proc)
        yield proc, base
    finally:
        proc.stop()


@contextmanager
def running_daemon(home: Path, config: Path, data_dir: Path, log_path: Path) -> Iterator[ManagedProcess]:
    """`dagster-daemon run` (sensors, automation, run launching); stopped as a group on exit."""
    proc = ManagedProcess([_exe("dagster-daemon"), "run", "-m", MODULE],
                          env=dagster_env(home, config, data_dir), cwd=REPO_ROOT, log_path=log_path,
                          name="dagster-daemon").start()
    try:
        yield proc
    finally:
        proc.stop()


def require_chromium() -> None:
    """Skip locally / fail in CI unless the playwright package and Chromium are here."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        require_real_component("the playwright Python package is not installed")
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        require_real_component("chromium is not installed (bash deploy/install_system_deps.sh)")


def launch_chromium(pw: Any) -> Browser:
    """Headless system Chromium (never a downloaded one: no `playwright install` here)."""
    exe = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    return pw.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS, headless=True)


def new_page(browser: Browser, **kwargs: Any) -> Page:
    """A page whose actions *and* `expect` assertions all wait up to `UI_ACTION_MS`.

    Playwright's `expect` keeps its own 5 s default whatever the page's timeout is; on a
    loaded machine the UI can take longer than that to react (a launch dialog reads
    "Launching..." while the webserver submits the run), which made assertions flaky.
    """
    from playwright.sync_api import expect

    expect.set_options(timeout=UI_ACTION_MS)
    page = browser.new_page(**kwargs)
    page.set_default_timeout(UI_ACTION_MS)
    page.set_default_navigation_timeout(UI_ACTION_MS)
    return page


def dismiss_community_modal(page: Page, base_url: str) -> None:
    """Keep the 'Join the Dagster community' modal of a fresh instance out of the way.

    The instance is told it was seen (the `setNuxSeen` mutation the modal's Skip button
    sends), so screenshots show the page; should it still appear, at an unpredictable
    moment after load, a locator handler clicks 'Skip' whenever it blocks an action.
    """
    assert graphql(base_url, "mutation { setNuxSeen }")["setNuxSeen"] is True
    modal = page.get_by_role("dialog").filter(has_text="Join the Dagster community")
    page.add_locator_handler(modal, lambda m: m.get_by_role("button", name="Skip").click())


def choose_partitions(page: Page, dialog: Locator, values: list[str]) -> None:
    """In the launch dialog, pick one partition key per dimension, in dimension order.

    Each dimension has a tag selector showing a placeholder until something is picked, so
    the first placeholder left is always the next dimension to fill.
    """
    header = dialog.get_by_text("Launch runs to materialize").first
    for value in values:
        dialog.get_by_text("Select a partition or create one").first.click()
        search = page.get_by_placeholder("Filter partitions")
        search.wait_for()
        page.get_by_role("menuitem").filter(has=page.get_by_text(value, exact=True)).first.click()
        header.click()  # closes the partition popover (Escape would close the dialog too)
        search.wait_for(state="hidden")
        dialog.get_by_text(value, exact=True).first.wait_for()


def processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line contains `text` (use a path unique to the test)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmd:
                pids.append(int(entry))
    return pids


def assert_no_leftovers(text: str, what: str, grace_s: float = 30.0) -> None:
    """Fail if a process whose command line mentions `text` outlives `what`, killing it.

    `text` is a path unique to the test, so whatever matches was started (directly or by a
    Dagster process) by this test and is ours to end. A process of the stopped group may
    still be exiting on a loaded machine (SIGKILL is delivered, the exit is not yet done): it
    gets `grace_s` to disappear; one outside the group never would, and fails the test.
    """
    deadline = time.monotonic() + grace_s
    while (leftovers := processes_mentioning(text)) and time.monotonic() < deadline:
        time.sleep(0.2)
    described = {pid: _cmdline(pid) for pid in leftovers}
    for pid in leftovers:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    assert not leftovers, f"{what}: processes outlived it by {grace_s:.0f} s: {described}"


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:300]
    except OSError:
        return "?"


#: GraphQL: launch a run (`{"p": ExecutionParams}`); the answer's `__typename` says how it went.
LAUNCH_RUN = """
mutation Launch($p: ExecutionParams!) {
  launchRun(executionParams: $p) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on InvalidSubsetError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}
"""
#: GraphQL: a run's status and tags (`{"id": run id}`).
RUN_STATUS = """
query Run($id: ID!) { runOrError(runId: $id) { ... on Run { status tags { key value } } } }
"""
#: The code location `dagster dev` / the webserver serves nel's definitions as.
REPO_SELECTOR = {"repositoryLocationName": MODULE, "repositoryName": "__repository__"}


def launch_shard_run(base_url: str, model: str, shard: int = 0) -> str:
    """Launch `gsm8k/shard_results` for partition `model|shard` through the webserver's
    GraphQL (as the UI's launch button does); returns the run id."""
    launched = graphql(base_url, LAUNCH_RUN, {"p": {
        "selector": {**REPO_SELECTOR, "jobName": "__ASSET_JOB",
                     "assetSelection": [{"path": ["gsm8k", "shard_results"]}]},
        "executionMetadata": {"tags": [{"key": "dagster/partition", "value": f"{model}|{shard}"},
                                       {"key": "dagster/partition/model", "value": model},
                                       {"key": "dagster/partition/shard", "value": str(shard)}]},
    }})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    return str(launched["run"]["runId"])


def finished_run(base_url: str, run_id: str) -> dict[str, Any] | None:
    """The run (status, tags) once it has finished, else None (a `wait_for` probe)."""
    run = graphql(base_url, RUN_STATUS, {"id": run_id})["runOrError"]
    return run if run.get("status") in FINISHED else None


RUNS = """
query Runs($tags: [ExecutionTag!]) {
  runsOrError(filter: {tags: $tags}, limit: 50) {
    __typename ... on Runs { results { runId status tags { key value } } }
  }
}
"""


def runs_with_partition(base_url: str, partition: str) -> dict[str, str]:
    """{run id: status} of the runs tagged with partition key `partition`."""
    data = graphql(base_url, RUNS, {"tags": [{"key": "dagster/partition", "value": partition}]})
    res = data["runsOrError"]
    assert res["__typename"] == "Runs", res
    return {r["runId"]: r["status"] for r in res["results"]}


def all_runs(base_url: str) -> dict[str, str]:
    """{run id: status} of the latest 50 runs."""
    res = graphql(base_url, RUNS, {"tags": []})["runsOrError"]
    assert res["__typename"] == "Runs", res
    return {r["runId"]: r["status"] for r in res["results"]}


MATERIALIZATIONS = """
query Mats($keys: [AssetKeyInput!], $parts: [String!]) {
  assetNodes(assetKeys: $keys) {
    assetMaterializations(partitions: $parts, limit: 1) {
      runId partition
      metadataEntries {
        label
        ... on FloatMetadataEntry { floatValue }
        ... on IntMetadataEntry { intValue }
        ... on TextMetadataEntry { text }
        ... on BoolMetadataEntry { boolValue }
      }
    }
  }
}
"""


def latest_materialization(base_url: str, key: list[str], partition: str) -> dict[str, Any] | None:
    """The latest materialization of `key` for `partition`: {"runId", "metadata": {label: value}}."""
    data = graphql(base_url, MATERIALIZATIONS, {"keys": [{"path": key}], "parts": [partition]})
    (node,) = data["assetNodes"]
    mats = node["assetMaterializations"]
    if not mats:
        return None
    m = mats[0]
    md = {e["label"]: next((e[k] for k in ("floatValue", "intValue", "text", "boolValue") if k in e), None)
          for e in m["metadataEntries"]}
    return {"runId": m["runId"], "partition": m["partition"], "metadata": md}


#: The edges drawn in an asset graph page: each SVG edge path starts at its upstream node's
#: right side and ends (before the arrowhead) just left of its downstream node; nodes are
#: foreignObjects (SVG: no innerText) whose leaf elements' text names the asset.
_GRAPH_EDGES_JS = """() => {
  const nodes = Array.from(document.querySelectorAll('foreignObject')).map(f => ({
    x: +f.getAttribute('x'), y: +f.getAttribute('y'), w: +f.getAttribute('width'),
    h: +f.getAttribute('height'),
    lines: Array.from(f.querySelectorAll('*')).filter(e => e.children.length === 0)
      .map(e => (e.textContent || '').trim())}));
  const at = (px, py, side) => nodes.find(n => py >= n.y && py <= n.y + n.h &&
    (side === 'right' ? Math.abs(n.x + n.w - px) < 1 : px < n.x && n.x - px < 20));
  return Array.from(document.querySelectorAll('svg path[marker-end]')).map(p => {
    const nums = p.getAttribute('d').match(/-?[0-9.]+/g).map(Number);
    const src = at(nums[0], nums[1], 'right'), dst = at(nums[nums.length - 2], nums[nums.length - 1], 'left');
    return [src ? src.lines : null, dst ? dst.lines : null];
  });
}"""


def graph_edges(page: Page, names: set[str]) -> set[tuple[str, str]]:
    """(upstream, downstream) asset names of the edges the asset graph on `page` draws,
    for nodes labelled with one of `names` (an edge with an end on no such node is left out)."""
    out: set[tuple[str, str]] = set()
    for src, dst in page.evaluate(_GRAPH_EDGES_JS):
        a = next((s for s in src or [] if s in names), None)
        b = next((s for s in dst or [] if s in names), None)
        if a and b:
            out.add((a, b))
    return out
