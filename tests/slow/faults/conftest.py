"""Fixtures for fault injection: the LD_PRELOAD shim (built with gcc), small tmpfs mounts, and a
driver process running a store under them."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
DRIVER = HERE / "fault_driver.py"


@pytest.fixture(scope="session")
def shim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``fault_shim.so``, compiled from ``fault_shim.c`` for this session (never committed)."""
    compiler = shutil.which("gcc") or shutil.which("cc")
    if compiler is None:
        pytest.skip("no C compiler for the fault shim")
    out = tmp_path_factory.mktemp("shim") / "fault_shim.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O2", "-o", str(out), str(HERE / "fault_shim.c"), "-ldl"],
        check=True,
        capture_output=True,
    )
    return out


@contextlib.contextmanager
def tmpfs(size: str) -> Iterator[Path]:
    """A private tmpfs of ``size`` (e.g. ``"3m"``), unmounted and removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mountpoint = Path(tempfile.mkdtemp(prefix="jobledger-tmpfs-"))
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(mountpoint)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        mountpoint.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False, capture_output=True)
        with contextlib.suppress(OSError):
            mountpoint.rmdir()


def remount(mountpoint: Path, mode: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["mount", "-o", f"remount,{mode}", str(mountpoint)],
        capture_output=True,
        text=True,
        check=False,
    )


def fill(directory: Path) -> Path:
    """Fill the file system holding ``directory`` until a write fails with ENOSPC."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (65536, 4096, 512, 1):  # then smaller writes, so not one more page fits
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)
    return filler


class Driven:
    """A ``fault_driver.py`` child process: ``call("op", **args)`` returns its JSON answer."""

    def __init__(self, target: str, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(DRIVER), target],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise AssertionError(f"the driver died: {self.process.stderr.read()}")  # type: ignore[union-attr]
        answer: dict[str, Any] = json.loads(line)
        assert answer["ok"] or answer["coded"], f"an uncoded exception: {answer}"
        return answer

    def ok(self, op: str, **args: Any) -> Any:
        answer = self.call(op, **args)
        assert answer["ok"], answer
        return answer["result"]

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            self.process.stdin.close()
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
