"""The launcher table (nel_resources.launchers.registry): every cluster type is a Launcher
found by name, unknown names get a suggestion, and a new type is one module plus one table
line: `type: subprocess` (nel_resources.launchers.subprocess_workers) runs a real sharded
GSM8K run through the unchanged runner."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.datasets import load_file
from benchmarks.errors import NelError
from nel_resources.checks import check_supported, load_checked_config
from nel_resources.config import ConfigError
from nel_resources.launchers import registry
from nel_resources.launchers.base import Launcher
from tests.support.cluster_runs import MODEL, items, local_run, shard_materializations, write_config
from tests.support.gsm8k import answers_for


def test_every_registered_type_is_a_launcher_of_its_own_name() -> None:
    for name in registry.cluster_types():
        launcher = registry.get_launcher(name)
        assert isinstance(launcher, Launcher)
        assert launcher.kind == registry.ALIASES.get(name, name)
        assert launcher.runs in ("here", "partitions", "submits")
        method = {"partitions": "run", "submits": "submit"}.get(launcher.runs)
        if method is not None:  # it implements how its partitions run
            assert getattr(type(launcher), method) is not getattr(Launcher, method), name


def test_unknown_type_is_one_line_with_a_suggestion(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("services: {}\nbenchmarks: []\ncluster:\n  type: dokcer\n")
    with pytest.raises(ConfigError) as exc:
        load_checked_config(p)
    msg = str(exc.value)
    assert msg.startswith(f"{p}:4: cluster.type: unknown cluster type 'dokcer'; did you mean 'docker'?"), msg
    assert "\n" not in msg
    with pytest.raises(NelError, match="did you mean 'slurm'"):
        registry.get_launcher("slurn")


def test_each_type_refuses_its_own_keys(tmp_path: Path) -> None:
    """The refusals live on the launchers; the config check asks the table."""
    cases = {
        "docker": ("cluster:\n  type: docker\n  docker: {bogus: 1}\n", ":6: key cluster.docker.bogus: "),
        "ray": ("cluster:\n  type: ray\n  ray: {num_cpus: -1}\n", ":6: key cluster.ray.num_cpus: "),
        "k8s": ("cluster:\n  type: k8s\n  k8s: {cpu: lots}\n", ":6: cluster.k8s.cpu: "),
        "local": ("cluster:\n  type: local\n  max_memory: 1G\n", ":6: key cluster.max_memory: "),
        "slurm": ("cluster:\n  type: slurm\n  node_pools: {cpu: {partition: debug}}\n  conda_env: x\n",
                  ":7: key cluster.conda_env: "),
    }
    base = "services:\n  m: {type: api, url: 'http://127.0.0.1:9/v1', model: m}\nbenchmarks: [{name: gsm8k}]\n"
    for typ, (block, where) in cases.items():
        p = tmp_path / f"{typ}.yaml"
        p.write_text(base + block)
        with pytest.raises(ConfigError) as exc:
            check_supported(load_checked_config(p))
        assert where in str(exc.value), (typ, str(exc.value))


def test_a_new_cluster_type_is_one_module_and_one_table_line(
        tmp_path: Path, reference_server, data_dir: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from dagster_project.runner import run_eval

    n, shards = 6, 2
    rows = load_file(data_dir / "gsm8k" / "test.jsonl")[:n]
    url = reference_server(answers=answers_for(rows, {0, 3}))
    monkeypatch.setenv("NEL_DATA_DIR", str(data_dir))
    local = local_run(tmp_path, url, {"NEL_DATA_DIR": str(data_dir)}, n=n, shards=shards)
    out = tmp_path / "sub"
    cfg = load_checked_config(write_config(tmp_path / "sub.yaml", url, out, n=n, shards=shards,
                                           cluster={"type": "subprocess",
                                                    "subprocess": {"workers": 2}}))
    summary = run_eval(cfg, progress=False)
    assert summary.exit_status == 0, summary.failures
    done = shard_materializations(out)
    assert set(done) == {f"{MODEL}|0", f"{MODEL}|1"}, done
    assert all("subprocess" in md["launched_by"] for md in done.values()), done
    assert items(out) == items(local)
