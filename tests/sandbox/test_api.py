"""The provider interface, as every provider implements it: exec, files, status, close, typed results."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sandbox_helpers import Target

from palaestra.core.errors import InfraError
from palaestra.sandbox import Mount, SandboxError, SandboxSpec, get_provider
from palaestra.sandbox.providers import default_provider_name


async def test_exec_files_status_close(target: Target, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PALAESTRA_TEST_SECRET", "hunter2")
    box = await target.provider.create(target.spec(files={"seed.txt": "seeded", "sub/dir/f.py": b"x = 1\n"},
                                                   env={"GREETING": "hi"}))
    r = await box.exec(["/bin/sh", "-c", "cat seed.txt; echo; echo $GREETING $EXTRA; env; echo oops >&2; exit 3"],
                       env={"EXTRA": "there"})
    assert r.exit_code == 3 and r.failure is None and not r.ok
    assert r.stdout.startswith("seeded\nhi there\n")
    assert "hunter2" not in r.stdout, "the runtime's environment leaked into the sandbox"
    assert r.stderr == "oops\n" and r.duration_s > 0

    r = await box.exec(["cat"], stdin=b"from stdin")
    assert r.stdout == "from stdin"
    r = await box.exec(["/bin/sh", "-c", "pwd"], cwd="sub")
    assert r.stdout.strip() == box.resolve("sub")

    await box.upload("out/new.txt", "uploaded")
    assert await box.download("out/new.txt") == b"uploaded"
    assert (await box.exec(["cat", "out/new.txt"])).stdout == "uploaded"
    assert await box.download_dir(".") == {"seed.txt": b"seeded", "sub/dir/f.py": b"x = 1\n",
                                           "out/new.txt": b"uploaded"}
    await box.upload("/tmp/t.txt", b"tmp")
    assert await box.download("/tmp/t.txt") == b"tmp"
    with pytest.raises(ValueError):
        await box.download("missing.txt")

    status = await box.status()
    assert status.state == "running" and status.execs >= 4 and status.labels["run_id"] == "pytest"
    await box.close()
    await box.close()  # idempotent
    assert (await box.status()).state == "closed"
    with pytest.raises(SandboxError) as info:
        await box.exec(["true"])
    assert isinstance(info.value, InfraError) and info.value.failure == "sandbox"


async def test_output_is_capped_with_flags(target: Target) -> None:
    async with await target.provider.create(target.spec(output_cap_bytes=1000)) as box:
        r = await box.exec(["/bin/sh", "-c", "head -c 5000 /dev/zero | tr '\\0' a; head -c 3000 /dev/zero >&2"])
        assert len(r.stdout) == 1000 and r.stdout_truncated
        assert len(r.stderr) == 1000 and r.stderr_truncated
        r = await box.exec(["echo", "small"])
        assert r.stdout == "small\n" and not r.stdout_truncated


async def test_missing_command_is_the_programs_failure(target: Target) -> None:
    async with await target.provider.create(target.spec()) as box:
        r = await box.exec(["/no/such/program"])
        assert r.exit_code != 0 and r.failure is None


HOST = ["local", "process"]


def _read(path: str) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


REPO_PYPROJECT = str(Path(__file__).resolve().parents[2] / "pyproject.toml")


def _exists(path: str) -> bool:
    return os.path.exists(path)


@pytest.mark.parametrize("name", HOST)
async def test_symlinks_planted_by_the_sandbox_are_never_followed(name: str) -> None:
    provider = get_provider(name)
    async with await provider.create(SandboxSpec()) as box:
        await box.exec(["/bin/sh", "-c", "ln -s /etc/passwd leak; ln -s /etc linkdir; mkfifo fifo"])
        with pytest.raises(ValueError, match="symlink|regular"):
            await box.download("leak")
        with pytest.raises(ValueError):
            await box.download("linkdir/passwd")
        with pytest.raises(ValueError, match="regular"):
            await asyncio.wait_for(box.download("fifo"), 5)
        before = _read("/etc/passwd")
        await box.upload("leak", "replaced")  # replaces the link, never writes through it
        assert _read("/etc/passwd") == before
        assert await box.download("leak") == b"replaced"
        with pytest.raises(ValueError):
            await box.upload("linkdir/evil", "x")
        assert not _exists("/etc/evil")
        for bad in ("../escape", "/etc/hosts", "a/../../b"):
            with pytest.raises(ValueError):
                await box.upload(bad, "x")
        files = await box.download_dir(".")
        assert set(files) == {"leak"}


@pytest.mark.parametrize("name", HOST)
async def test_limits_come_back_typed(name: str) -> None:
    provider = get_provider(name)
    async with await provider.create(SandboxSpec(cpu_time_s=1, disk_mb=16, pids=16)) as box:
        r = await box.exec(["/bin/sh", "-c", "while :; do :; done"], timeout=10)
        assert r.failure == "limit" and "CPU" in r.detail, r
        r = await box.exec(["/bin/sh", "-c", "head -c 40000000 /dev/zero > big; echo rc=$?"], timeout=10)
        assert "rc=0" not in r.stdout
        r = await box.exec(["/bin/sh", "-c", "sleep 60"], timeout=0.3)
        assert r.failure == "timeout" and r.exit_code == 137 and r.duration_s < 30  # killed, not finished


async def test_bwrap_failure_is_a_sandbox_error() -> None:
    provider = get_provider("local")
    spec = SandboxSpec(mounts=(Mount("/no/such/source/dir", "/data"),))
    async with await provider.create(spec) as box:
        with pytest.raises(SandboxError, match="bubblewrap"):
            await box.exec(["true"])


@pytest.fixture
def rootfs_dir() -> Iterator[Path]:
    """Under /tmp with mode 755: the sandbox uid must be able to read it (pytest's tmp_path is 700)."""
    path = Path(tempfile.mkdtemp(prefix="palaestra-rootfs-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


async def test_local_with_its_own_root_filesystem(rootfs_dir: Path) -> None:
    if not _exists("/bin/busybox"):
        pytest.skip("busybox: busybox-static is not installed (.ci/setup-sandbox.sh installs it)")
    tmp_path = rootfs_dir
    (tmp_path / "bin").mkdir()
    shutil.copy("/bin/busybox", tmp_path / "bin" / "busybox")
    for applet in ("sh", "ls", "cat", "echo", "id"):
        (tmp_path / "bin" / applet).symlink_to("busybox")
    (tmp_path / "etc").mkdir()
    provider = get_provider("local")
    async with await provider.create(SandboxSpec(rootfs=str(tmp_path), files={"f.txt": "from the host"})) as box:
        r = await box.exec(["/bin/sh", "-c", "cat f.txt; echo; ls /"])
        assert r.ok, r
        assert r.stdout.split() == ["from", "the", "host", "bin", "dev", "etc", "proc", "tmp", "workspace"]


async def test_seccomp_and_namespaces_inside_local() -> None:
    code = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print('unshare', libc.unshare(0x10000000), ctypes.get_errno())\n"
        "print('mount', libc.mount(b'none', b'/tmp', b'tmpfs', 0, None), ctypes.get_errno())\n"
        "print('ptrace', libc.ptrace(16, 1, 0, 0), ctypes.get_errno())\n"
        "print(open('/proc/self/status').read())\n"
    )
    provider = get_provider("local")
    async with await provider.create(SandboxSpec()) as box:
        r = await box.exec([provider.python, "-c", code])  # type: ignore[attr-defined]
        assert "unshare -1 1" in r.stdout and "mount -1 1" in r.stdout and "ptrace -1 1" in r.stdout, r.stdout
        assert "Seccomp:\t2" in r.stdout and "NoNewPrivs:\t1" in r.stdout
        r = await box.exec(["/bin/sh", "-c", "hostname; ls /proc | grep -c '^[0-9]'"])
        assert r.stdout.split()[0] == "sandbox" and int(r.stdout.split()[1]) < 5  # own pid namespace


async def test_landlock_confines_the_process_provider(tmp_path: object) -> None:
    provider = get_provider("process")
    readable = REPO_PYPROJECT  # the repository's own file, outside the box
    async with await provider.create(SandboxSpec()) as box:
        r = await box.exec(["/bin/sh", "-c", f"cat {readable} >/dev/null && echo READ; echo ok > f && cat f"])
        assert "READ" not in r.stdout and "ok" in r.stdout, r


def test_provider_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    from palaestra.settings import Settings

    # the variable is read at the edge (Settings) and handed down; the sandbox package reads none
    monkeypatch.setenv("PALAESTRA_SANDBOX", "process")
    assert default_provider_name(Settings.from_env().sandbox) == "process"
    assert default_provider_name() == "local", "bubblewrap must work here: run .ci/setup-sandbox.sh"
    monkeypatch.delenv("PALAESTRA_SANDBOX")
    assert default_provider_name(Settings.from_env().sandbox) == "local"
    with pytest.raises(SandboxError, match="unknown sandbox provider"):
        get_provider("nope")


def test_process_provider_warns_loudly() -> None:
    from palaestra.sandbox import process

    process._warned.discard("process")
    with pytest.warns(RuntimeWarning, match="PARTIAL isolation.*Not isolated: no pid namespace"):
        process.ProcessProvider(reap=False)


async def test_lifetime_is_enforced() -> None:
    provider = get_provider("local")
    async with await provider.create(SandboxSpec(lifetime_s=3.0)) as box:  # room for one exec under load
        assert (await box.exec(["true"])).ok
        deadline = time.monotonic() + 60  # wait on the state itself; the bound is only against a hang
        while (await box.status()).state != "expired" and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert (await box.status()).state == "expired"
        with pytest.raises(SandboxError, match="lifetime"):
            await box.exec(["true"])


async def test_none_runs_unisolated_on_request(tmp_path: object) -> None:
    with pytest.warns(RuntimeWarning, match="NO isolation"):
        from palaestra.sandbox import process

        process._warned.discard("none")
        provider = process.NoneProvider(reap=False)
    async with await provider.create(SandboxSpec()) as box:
        r = await box.exec(["/bin/sh", "-c", "echo $PALAESTRA_SANDBOX_ID; id -u"])
        assert r.stdout.split() == [box.id, str(os.getuid())]
