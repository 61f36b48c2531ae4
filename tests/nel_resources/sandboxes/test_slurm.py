"""The `slurm` sandbox on the real single-node SLURM cluster (deploy/slurm/start_slurm.sh):
allocations, steps, limits, cleanup; and the Pyxis command lines, which cannot run here."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nel_resources.checks import check_supported
from nel_resources.config import ConfigError, load_config
from nel_resources.config.benchmarks import SandboxConfig
from nel_resources.config.deployment import NodePool
from nel_resources.sandboxes import make_factory
from nel_resources.sandboxes.base import SandboxError, SandboxSpec, VolumeMount, running
from nel_resources.sandboxes.slurm import (
    SlurmSandbox,
    SlurmSandboxFactory,
    SlurmSettings,
    parse_memory_mb,
)
from tests.support.slurm_cluster import start_slurm_cluster
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slurm


@pytest.fixture(scope="module", autouse=True)
def slurm_conf() -> Iterator[str]:
    conf = start_slurm_cluster()
    mp = pytest.MonkeyPatch()
    mp.setenv("SLURM_CONF", conf)
    yield conf
    mp.undo()


@pytest.fixture(scope="module")
def factory() -> SlurmSandboxFactory:
    # workdirs in the system temp directory: the node is this machine, and the sandbox's own
    # uid must be able to reach them (pytest's temp dirs are private to root)
    cfg = SandboxConfig(type="slurm", cpus=1, memory="256m", timeout=300, concurrency=8,
                        slots_per_node=2, container_env={"FROM_CONFIG": "c"})
    return SlurmSandboxFactory(cfg)


def _slurm(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout


def _procs_with(marker: str) -> list[str]:
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if marker in line and "ps -eo" not in line]


def _procs_of_uid(uid: int) -> list[str]:
    out = subprocess.run(["ps", "-o", "pid=", "-u", str(uid)], capture_output=True, text=True)
    return out.stdout.split()


def test_a_step_runs_in_the_sandbox_allocation_with_a_clean_environment(
        factory: SlurmSandboxFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NEL_TEST_SECRET_KEY", "sk-must-not-leak")
    spec = SandboxSpec(files={"prog.py": "print('from the file')", "sub/data.txt": "42"},
                       env={"FROM_SPEC": "s"})

    async def go() -> None:
        sb = factory.create(spec)
        async with running(sb):
            assert sb.job_id is not None
            # SLURM holds the allocation under our name, with the asked CPUs and lifetime
            name, cpus, limit, state = _slurm("squeue", "-h", "-j", sb.job_id,
                                              "-o", "%j %C %l %T").split()
            assert name.startswith("nel-sandbox-") and cpus == "1" and limit == "5:00"
            assert state == "RUNNING"
            r = await sb.exec("python3 prog.py; cat sub/data.txt; echo; "
                              "echo spec=$FROM_SPEC cfg=$FROM_CONFIG key=${NEL_TEST_SECRET_KEY:-none}; "
                              "pwd; echo to-stderr >&2; exit 7")
            assert r.return_code == 7 and r.stopped is None and not r.ok
            assert r.stdout.splitlines() == ["from the file", "42", "spec=s cfg=c key=none",
                                             "/workspace"]
            assert r.stderr == "to-stderr\n"  # srun's own "task 0: Exited" line is dropped
            ok = await sb.exec(["python3", "-c", "import os; print(os.getcwd())"], cwd="sub")
            assert ok.ok and ok.stdout.strip() == "/workspace/sub"
            fed = await sb.exec("wc -c", stdin=b"12345")
            assert fed.stdout.strip() == "5"
            # the command is a step of the sandbox's job while it runs
            held = asyncio.ensure_future(sb.exec("while [ ! -e go ]; do sleep 0.05; done; "
                                                 "echo released", timeout_sec=120))
            steps = await asyncio.to_thread(
                wait_for, lambda: [x for x in _slurm("squeue", "-h", "-s", "-j", str(sb.job_id),
                                                     "-o", "%i %j").splitlines()
                                   if x.split()[1].endswith("-s4")],
                timeout=60, what="the fourth step to show in squeue")
            assert steps[0].startswith(f"{sb.job_id}.")
            assert sb.host_dir is not None
            (sb.host_dir / "go").write_text("")
            assert (await held).stdout == "released\n"
        assert _slurm("squeue", "-h", "-j", sb.job_id, "-o", "%T").strip() in ("", "CANCELLED")
        assert sb.host_dir is not None and not sb.host_dir.exists()

    asyncio.run(go())


def test_a_timeout_cancels_the_step_and_the_sandbox_stays_usable(
        factory: SlurmSandboxFactory) -> None:
    marker = f"nel-timeout-{uuid.uuid4().hex[:8]}"

    async def go() -> None:
        async with running(factory.create(SandboxSpec())) as sb:
            r = await sb.exec(f"echo started; exec -a {marker} sleep 300", timeout_sec=1.5)
            assert r.stopped == "timeout" and not r.ok
            assert r.stdout == "started\n"
            # scancel of the step: SLURM forgets it and its process is gone from the node
            assert isinstance(sb, SlurmSandbox) and sb.job_id
            wait_for(lambda: _slurm("squeue", "-h", "-s", "-j", sb.job_id, "-o", "%j")
                     .count("-s1") == 0, timeout=60, what="the timed-out step to leave squeue")
            wait_for(lambda: not _procs_with(marker), timeout=60, what=f"{marker} to be killed")
            again = await sb.exec("echo still here")
            assert again.ok and again.stdout == "still here\n"

    asyncio.run(go())


def test_output_past_the_cap_stops_the_step(factory: SlurmSandboxFactory) -> None:
    async def go() -> None:
        async with running(factory.create(SandboxSpec())) as sb:
            r = await sb.exec("yes flood", timeout_sec=120, output_limit=10_000)
            assert r.stopped == "output_limit" and r.truncated
            assert len(r.stdout) == 10_000 and r.stdout.startswith("flood\nflood\n")

    asyncio.run(go())


def test_background_and_daemonized_processes_do_not_outlive_the_step(
        factory: SlurmSandboxFactory) -> None:
    marker = f"nel-leftover-{uuid.uuid4().hex[:8]}"

    async def go() -> None:
        async with running(factory.create(SandboxSpec())) as sb:
            r = await sb.exec(
                f"(exec -a {marker}-a sleep 300 &); "
                f"setsid bash -c 'exec -a {marker}-b sleep 300' </dev/null >/dev/null 2>&1 & "
                f"nohup bash -c 'exec -a {marker}-c sleep 300' >/dev/null 2>&1 & echo launched",
                timeout_sec=60)
            # the step ends with its program: the leftover holding stdout does not keep it open
            assert r.ok and r.stdout == "launched\n"
            wait_for(lambda: not _procs_with(marker), timeout=60,
                     what=f"the {marker} processes to be killed")

    asyncio.run(go())


def test_files_move_through_the_workdir_never_outside_it(
        factory: SlurmSandboxFactory, tmp_path: Path) -> None:
    src = tmp_path / "in.bin"
    src.write_bytes(bytes(range(256)) * 10)
    # the step's own uid writes there: a directory it can reach (pytest's are root's only)
    vol = Path(tempfile.mkdtemp(prefix="nel-test-vol-"))
    vol.chmod(0o777)

    async def go() -> None:
        spec = SandboxSpec(workdir="/workspace", volumes=[VolumeMount(str(vol), "/vol")])
        async with running(factory.create(spec)) as sb:
            await sb.upload(src, "/workspace/data/in.bin")
            r = await sb.exec("sha256sum data/in.bin | cut -c1-64; "
                              "cp data/in.bin out.bin && echo made > made.txt")
            assert r.ok
            await sb.download("out.bin", tmp_path / "back.bin")
            assert (tmp_path / "back.bin").read_bytes() == src.read_bytes()
            with pytest.raises(SandboxError, match="outside the sandbox's workdir"):
                await sb.upload(src, "/etc/passwd")
            with pytest.raises(SandboxError, match="outside the sandbox's workdir"):
                await sb.download("../../etc/passwd", tmp_path / "x")
            # a volume's path moves through its host directory (a Harbor task's /tests, /logs)
            await sb.upload(src, "/vol/sub/in.bin")
            assert (vol / "sub" / "in.bin").read_bytes() == src.read_bytes()
            r = await sb.exec("cp /vol/sub/in.bin /vol/copy.bin")
            assert r.ok, r
            await sb.download("/vol/copy.bin", tmp_path / "vol-back.bin")
            assert (tmp_path / "vol-back.bin").read_bytes() == src.read_bytes()

    try:
        asyncio.run(go())
    finally:
        shutil.rmtree(vol, ignore_errors=True)


def test_an_image_needs_pyxis_and_says_so_when_the_cluster_lacks_it(
        factory: SlurmSandboxFactory) -> None:
    sb = factory.create(SandboxSpec(image="python:3.12-slim"))

    async def go() -> None:
        with pytest.raises(SandboxError, match="Pyxis"):
            await sb.start()
        await sb.stop()

    asyncio.run(go())
    assert sb.job_id is None  # refused before asking SLURM for anything


def test_pyxis_and_allocation_command_lines(tmp_path: Path) -> None:
    pools = {"cpu": NodePool(partition="batch", nodes=2, gres="gpu:1")}
    cfg = SandboxConfig(type="slurm", image="nvcr.io/nvidia/pytorch:24.01", cpus=1.5,
                        memory="4g", timeout=90, node_pool="cpu", slots_per_node=3,
                        concurrency=16, container_env={"A": "1"})
    factory = SlurmSandboxFactory(cfg, node_pools=pools, shared_dir=tmp_path)
    assert factory.concurrency == 6  # 2 nodes x 3 slots, below concurrency 16
    spec = SandboxSpec(workdir="/work", env={"B": "two words"},
                       volumes=[VolumeMount("/data/ref", "/ref", readonly=True)])
    sb = factory.create(spec)
    name = sb.salloc_argv()[2].split("=", 1)[1]
    assert sb.salloc_argv() == ["salloc", "--no-shell", f"--job-name={name}", "--nodes=1",
                                "--ntasks=1", "--time=2", "--partition=batch", "--gres=gpu:1",
                                "--cpus-per-task=2", "--mem=4096M"]
    # a started sandbox (as on a Pyxis cluster): job 42, workdir on the shared filesystem
    sb.job_id, sb._host_dir = "42", tmp_path / "wd"
    argv = sb.step_argv("python3 -c 'print(1)'", timeout_sec=30, step_name="st", cwd="sub")
    assert argv == [
        "srun", "--jobid=42", "--overlap", "--nodes=1", "--ntasks=1", "--quiet", "--export=NONE",
        "--job-name=st", "--time=2", "--cpus-per-task=2",
        "--container-image=nvcr.io/nvidia/pytorch:24.01", f"--container-name={name}",
        f"--container-mounts={tmp_path / 'wd'}:/work,/data/ref:/ref:ro",
        "--container-workdir=/work/sub", "--no-container-mount-home",
        "/usr/bin/env", "A=1", "B=two words", "/bin/bash", "-c", "python3 -c 'print(1)'"]


def test_memory_sizes_read_as_slurm_reads_them() -> None:
    assert [parse_memory_mb(v) for v in ("4g", "512M", "2GiB", "1024", 300, "1.5g")] == \
        [4096, 512, 2048, 1024, 300, 1536]
    with pytest.raises(SandboxError, match="not a size"):
        parse_memory_mb("lots")
    with pytest.raises(SandboxError, match="node_pool 'gpu'"):
        SlurmSettings.from_config(SandboxConfig(type="slurm", node_pool="gpu"), node_pools={})


def test_a_config_with_a_slurm_sandbox_is_accepted_and_builds_through_make_factory(
        tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("services:\n  model: {type: api, url: 'http://127.0.0.1:9/v1/chat/completions', "
                    "model: m}\nbenchmarks:\n  - name: gsm8k\n    sandbox: hpc\nsandboxes:\n"
                    "  hpc: {type: slurm, cpus: 1, memory: 512m, concurrency: 9, "
                    "slots_per_node: 3}\n")
    cfg = load_config(path)
    check_supported(cfg)  # SLURM runs here: nothing refused
    factory = make_factory(cfg.sandboxes["hpc"])
    assert isinstance(factory, SlurmSandboxFactory) and factory.concurrency == 3
    assert factory.settings.memory_mb == 512 and factory.settings.cpus == 1
    # an image per problem is not built for slurm: refused in one line, not ignored
    path.write_text(path.read_text().replace("sandbox: hpc", "sandbox: hpc2")
                    + "  hpc2: {type: slurm, image_template: 'img:{name}'}\n")
    with pytest.raises(ConfigError) as err:
        check_supported(load_config(path))
    assert str(err.value) == (
        f"{path}:8: key sandboxes.hpc2.image_template: an image per problem (`image_template`) "
        "in slurm sandboxes is not supported yet in nel; give one `image`")
    with pytest.raises(SandboxError, match="image_template"):
        make_factory(SandboxConfig(type="slurm", image_template="img:{name}"))


def test_escape_drills_on_a_bare_node_step(factory: SlurmSandboxFactory, tmp_path: Path) -> None:
    """Untrusted code in a bare-node step (bubblewrap inside the srun step) is contained, and
    the sandbox keeps working after each drill."""
    host_secret = tmp_path / "host-secret.txt"
    host_secret.write_text("host only")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    marker = f"nel-drill-{uuid.uuid4().hex[:8]}"

    async def go() -> None:
        async with running(factory.create(SandboxSpec())) as sb:
            assert isinstance(sb, SlurmSandbox)
            net = await sb.exec(["python3", "-c", "import socket; socket.create_connection("
                                 f"('127.0.0.1', {port}), timeout=5); print('connected')"])
            assert net.return_code != 0 and "connected" not in net.stdout
            read = await sb.exec(f"cat {host_secret}")
            assert read.return_code != 0 and "host only" not in read.stdout
            write = await sb.exec("echo x > /usr/nel-escape")
            assert write.return_code != 0 and "Read-only file system" in write.stderr
            # elsewhere it writes into its own private root, never the host's
            await sb.exec("echo y > /etc/nel-escape; echo z > /workspace/../nel-escape")
            assert not any(Path(d, "nel-escape").exists() for d in ("/usr", "/etc", "/"))
            assert sb.host_dir is not None and not (sb.host_dir.parent / "nel-escape").exists()
            hog = await sb.exec(["python3", "-c", "b = bytearray(2 << 30); print(len(b))"])
            assert hog.stopped == "memory" and not hog.ok  # 256m of address space
            bomb = await sb.exec("bomb() { bomb | bomb & }; bomb; sleep 2; echo survived",
                                 timeout_sec=60)
            # the process limit refuses the forks (or the timeout ends it) ...
            assert "fork: retry: Resource temporarily unavailable" in bomb.stderr \
                or bomb.stopped == "timeout"
            # ... and none of the sandbox's processes outlives the command
            assert sb._uid is not None
            wait_for(lambda: not _procs_of_uid(sb._uid or -1), timeout=60,
                     what="the fork bomb's processes to be gone")
            kill = await sb.exec(f"(exec -a {marker} sleep 300 &); kill -9 $PPID; kill -9 1; "
                                 "echo after")
            assert isinstance(kill.return_code, int)
            wait_for(lambda: not _procs_with(marker), timeout=60, what=f"{marker} to die")
            # a symlink the program plants does not lead nel's file moves out of the workdir
            await sb.exec(f"ln -s {host_secret} planted")
            with pytest.raises(SandboxError, match="leads outside"):
                await sb.download("planted", tmp_path / "stolen")
            with pytest.raises(SandboxError, match="leads outside"):
                await sb.upload(host_secret, "planted")
            still = await sb.exec("echo alive")
            assert still.ok and still.stdout == "alive\n"

    try:
        asyncio.run(go())
    finally:
        listener.close()
    assert host_secret.read_text() == "host only"


def _pool_config(tmp_path: Path, sandbox: str, cluster: str = "slurm") -> Path:
    path = tmp_path / "pool.yaml"
    pools = ("  node_pools:\n    cpu: {partition: debug}\n    sandbox: {partition: het, nodes: 1}\n"
             if cluster == "slurm" else "")
    path.write_text("services:\n  model: {type: api, url: 'http://127.0.0.1:9/v1/chat/completions', "
                    "model: m}\nbenchmarks:\n  - name: gsm8k\n    sandbox: hpc\nsandboxes:\n"
                    f"  hpc: {sandbox}\ncluster:\n  type: {cluster}\n{pools}")
    return path


def test_a_sandbox_node_pool_places_its_allocations_on_that_pool(tmp_path: Path) -> None:
    from nel_resources.resources import SandboxResource
    from nel_resources.specs import resolve

    cfg = load_config(_pool_config(tmp_path, "{type: slurm, node_pool: sandbox, concurrency: 8, "
                                              "slots_per_node: 2, memory: 256m}"))
    check_supported(cfg)  # accepted: the slurm sandbox goes to pool `sandbox`
    bench = resolve(cfg).benchmarks[0]
    assert bench.sandbox_pool is not None and bench.sandbox_pool.partition == "het"
    resource = SandboxResource.from_config(bench.name, bench.sandbox, bench.sandbox_pool)

    async def go() -> tuple[str, str]:
        async with resource.open() as factory:
            assert factory.concurrency == 2  # 1 node x 2 slots
            sb = factory.create(SandboxSpec())
            async with running(sb):
                partition, nodes = _slurm("squeue", "-h", "-j", str(sb.job_id), "-o", "%P %N").split()
                return partition, nodes

    # the real cluster put the allocation on the pool's partition and its node
    assert asyncio.run(go()) == ("het", "vm-het")


def test_a_sandbox_node_pool_is_refused_where_nothing_can_place_it(tmp_path: Path) -> None:
    # only a slurm cluster has node pools
    apptainer = "{type: apptainer, image: x.sif, node_pool: sandbox, sif_cache_dir: /tmp}"
    with pytest.raises(ConfigError, match=r"key sandboxes\.hpc\.node_pool: a sandbox node pool "
                       r"without a slurm cluster"):
        check_supported(load_config(_pool_config(tmp_path, apptainer, cluster="local")))
    # a type that runs where the eval client runs (only the config's schema keeps it from
    # naming a pool): the factory refuses rather than ignore the pool
    with pytest.raises(SandboxError, match=r"a `local` sandbox cannot be placed on a node pool "
                       r"\(node_pool 'sandbox'\): use `type: slurm` or `type: apptainer`"):
        make_factory(SandboxConfig.model_construct(type="local", node_pool="sandbox"))
    with pytest.raises(SandboxError, match=r"needs the config's cluster\.node_pools"):
        make_factory(SandboxConfig(type="slurm", node_pool="sandbox"))
