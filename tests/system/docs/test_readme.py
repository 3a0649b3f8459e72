"""The README works as written: its Python examples run (each in a fresh working directory) and
print instants as datetimes, and its commands run from a fresh clone after its install line."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = [
    block
    for block in re.findall(r"```python\n(.*?)```", README, re.S)
    if "import jobledger" in block
]
# An epoch-ms instant of these decades (2001..2286) printed as a bare number.
RAW_EPOCH_MS = re.compile(r"(?<![\d.])1\d{12}(?![\d.])")
# What the README's install line makes: everything else runs the clone's .venv/bin tools.
VENV_TOOLS = ("python", "python3", "pip", "jobledger")
ACTIVATED = "`. .venv/bin/activate`"


def test_the_readme_has_runnable_examples():
    assert len(BLOCKS) >= 2


def _run_example(index: int, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    script = tmp_path / f"example_{index}.py"
    script.write_text(BLOCKS[index])
    return subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(index, tmp_path):
    completed = _run_example(index, tmp_path)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip(), "an example should show what it did"
    # Instants are for people: an example prints a datetime (the *_time twins), never the
    # epoch milliseconds the API also carries.
    raw = RAW_EPOCH_MS.findall(completed.stdout)
    assert not raw, f"example {index} prints raw epoch ms {raw}:\n{completed.stdout}"


def _sections() -> list[tuple[str, str]]:
    parts = re.split(r"^## (.+)$", README, flags=re.M)
    return list(zip(parts[1::2], parts[2::2], strict=True))


def _commands(section: str) -> list[str]:
    """Shell commands of a section: lines of ```sh blocks and the `…` of "run `…`"."""
    found = []
    for block in re.findall(r"```sh\n(.*?)```", section, re.S):
        for line in block.splitlines():
            found += [part.strip() for part in line.split("#")[0].split("&&") if part.strip()]
    found += re.findall(r"\brun `([^`]+)`", section)
    return found


def test_readme_commands_use_the_clones_virtual_environment():
    """`python hello.py` in a fresh clone is not the interpreter the install line set up: the
    README says `.venv/bin/…`, or says to activate the environment first."""
    checked = 0
    for title, section in _sections():
        activated = ACTIVATED in section
        for command in _commands(section):
            tool = command.split()[0]
            if tool not in VENV_TOOLS or command.startswith("python3 -m venv"):
                continue
            checked += 1
            assert activated, (
                f"README § {title}: `{command}` needs the clone's virtual environment: write "
                f"`.venv/bin/{tool}` or say to activate it ({ACTIVATED})"
            )
    assert checked >= 5


def _stand_in_venv(venv: Path) -> None:
    """A virtual environment as `pip install -e .` leaves it, without running pip: this
    interpreter, and a .pth putting this tree's src (and this environment's packages) on the
    path."""
    bin_dir = venv / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    (venv / "pyvenv.cfg").write_text(
        f"home = {Path(sys.base_prefix) / 'bin'}\ninclude-system-site-packages = false\n"
    )
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = venv / "lib" / version / "site-packages"
    site.mkdir(parents=True)
    paths = [str(ROOT / "src"), *(path for path in sys.path if path.endswith("site-packages"))]
    (site / "jobledger-dev.pth").write_text("\n".join(paths) + "\n")


def test_the_first_app_runs_with_the_command_the_readme_gives(tmp_path):
    """Run "Save as `hello.py` … and run `…`" as written, in a stand-in for a fresh clone whose
    `.venv` has this tree installed; nothing else (no activated environment, no PYTHONPATH) makes
    jobledger importable."""
    found = re.search(r"Save as `hello.py`[^`]*run `([^`]+)`", README)
    assert found, "the README should say how to run hello.py"
    [hello] = [block for block in BLOCKS if "hello-app" in block]
    (tmp_path / "hello.py").write_text(hello)
    _stand_in_venv(tmp_path / ".venv")
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    }
    env["PATH"] = os.pathsep.join(("/usr/local/bin", "/usr/bin", "/bin"))
    completed = subprocess.run(
        found[1],
        shell=True,  # noqa: S602 — the README's own command line, as a reader types it
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, (found[1], completed.stderr)
    assert "final: succeeded" in completed.stdout
