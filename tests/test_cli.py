"""python -m interpexec and the interpexec console script: demo, doctor, info, --version, the
program name in usage lines, and bad arguments."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cli(*args: str, timeout: float = 100) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", "interpexec", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.mark.timeout(60)
def test_info():
    proc = cli("info")
    assert proc.returncode == 0, proc.stderr
    assert "%d.%d" % sys.version_info[:2] in proc.stdout
    assert "per-interpreter GIL" in proc.stdout
    assert "default max_workers" in proc.stdout


@pytest.mark.timeout(120)
def test_doctor_reports_each_module():
    proc = cli("doctor", "json", "_testsinglephase", "no_such_module_xyz")
    assert proc.returncode == 1  # a name given on the command line does not work
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.strip()}
    assert " works" in lines["json"]
    assert "refuses" in lines["_testsinglephase"]
    assert "not found" in lines["no_such_module_xyz"]


@pytest.mark.timeout(120)
def test_doctor_ok_exit_status():
    proc = cli("doctor", "json", "re")
    assert proc.returncode == 0, proc.stdout + proc.stderr


CRASHY = """
import _interpreters
if _interpreters.get_current()[0] != _interpreters.get_main()[0]:
    import ctypes
    ctypes.string_at(0)  # a segfault, as a broken extension would cause
"""


@pytest.mark.timeout(120)
def test_doctor_survives_a_package_that_crashes_the_interpreter(tmp_path):
    """A probe that kills its process is reported as a crash for that package,
    and doctor goes on with the others (its probes run in a child process)."""
    (tmp_path / "ie_crashy.py").write_text(CRASHY)
    env_path = str(tmp_path) + os.pathsep + ROOT
    proc = subprocess.run(
        [sys.executable, "-m", "interpexec", "doctor", "--json", "json", "ie_crashy", "re"],
        capture_output=True,
        text=True,
        timeout=100,
        env=dict(os.environ, PYTHONPATH=env_path),
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    states = {p["name"]: p["state"] for p in report["packages"]}
    assert states == {"json": "works", "ie_crashy": "crash", "re": "works"}


@pytest.mark.timeout(120)
def test_doctor_names_refusing_extensions_inside_a_package_and_degraded_accelerators(tmp_path):
    """A package whose top level imports but whose compiled submodule refuses is
    'refuses' naming the dotted submodule; one whose accelerator does not load in
    a worker (but does in the parent) is 'degraded' naming it."""
    import importlib.machinery
    import importlib.util

    origin = importlib.util.find_spec("_testsinglephase").origin
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    lazy = tmp_path / "ie_lazy_pkg"
    lazy.mkdir()
    (lazy / "__init__.py").write_text("")  # imports nothing compiled itself
    os.symlink(origin, lazy / ("_testsinglephase" + suffix))
    fast = tmp_path / "ie_fast_pkg"
    fast.mkdir()
    (fast / "__init__.py").write_text(
        "try:\n    from ._testsinglephase import sum as total\nexcept ImportError:\n    total = None\n"
    )
    os.symlink(origin, fast / ("_testsinglephase" + suffix))
    for name in ("ie_lazy_pkg", "ie_fast_pkg"):  # make them distributions, as pip would
        info = tmp_path / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        (info / "top_level.txt").write_text(name + "\n")
        (info / "RECORD").write_text(f"{name}/__init__.py,,\n{name}/_testsinglephase{suffix},,\n")
    proc = subprocess.run(
        [sys.executable, "-m", "interpexec", "doctor", "--json", "ie_lazy_pkg", "ie_fast_pkg"],
        capture_output=True,
        text=True,
        timeout=100,
        env=dict(os.environ, PYTHONPATH=str(tmp_path) + os.pathsep + ROOT),
    )
    report = {p["name"]: p for p in json.loads(proc.stdout)["packages"]}
    assert report["ie_lazy_pkg"]["state"] == "refuses", report
    assert report["ie_lazy_pkg"]["modules"] == ["ie_lazy_pkg._testsinglephase"]
    assert report["ie_fast_pkg"]["state"] == "degraded", report
    assert report["ie_fast_pkg"]["modules"] == ["ie_fast_pkg._testsinglephase"]
    assert proc.returncode == 1  # a named package refuses


@pytest.mark.timeout(120)
def test_demo_runs_and_checks_results():
    proc = cli("demo", "--tasks", "4", "--workers", "2", "--records", "300")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for label in ("serial", "ProcessPoolExecutor", "interpexec", "speedup"):
        assert label in proc.stdout
    assert "all results equal the serial run" in proc.stdout


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "args",
    [("demo", "--tasks", "0"), ("demo", "--workers", "x"), ("nosuchcommand",), ()],
)
def test_bad_arguments_exit_non_zero_with_one_line_error(args):
    proc = cli(*args)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize("command", ["demo", "doctor", "info"])
def test_help(command):
    proc = cli(command, "--help")
    assert proc.returncode == 0
    assert "usage:" in proc.stdout


def console_script() -> str:
    """The ``interpexec`` console script that installing the package put next to
    this interpreter (run with PYTHONPATH set, it imports this checkout)."""
    script = os.path.join(os.path.dirname(sys.executable), "interpexec")
    assert os.path.isfile(script), f"no console script at {script}: install the package (pip install -e .)"
    return script


def run_script(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([console_script(), *args], capture_output=True, text=True, timeout=60, env=env)


def checkout_version() -> str:
    proc = subprocess.run(
        [sys.executable, "-c", "import interpexec; print(interpexec.__version__)"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.mark.timeout(60)
def test_version_as_module_and_as_console_script():
    version = checkout_version()
    for proc in (cli("--version"), run_script("--version")):
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, f"interpexec {version}\n", "")


@pytest.mark.timeout(60)
def test_usage_names_the_program_as_invoked():
    as_module = f"{os.path.basename(sys.executable)} -m interpexec"
    proc = cli("--help")
    assert proc.returncode == 0
    assert proc.stdout.startswith(f"usage: {as_module} [-h] [--version] COMMAND")
    proc = run_script("--help")
    assert proc.returncode == 0
    assert proc.stdout.startswith("usage: interpexec [-h] [--version] COMMAND")
    # Subcommands and errors too.
    assert run_script("bench", "--help").stdout.startswith("usage: interpexec bench ")
    assert cli("info", "--help").stdout.startswith(f"usage: {as_module} info ")
    proc = run_script("nosuchcommand")
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: interpexec ")
    assert "\ninterpexec: error: argument COMMAND: invalid choice: 'nosuchcommand'" in proc.stderr
