"""python -m interpexec: demo, doctor, info, and bad arguments."""

from __future__ import annotations

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
    assert proc.returncode == 1  # a module named on the command line did not import
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.strip()}
    assert " ok" in lines["json"]
    assert "incompatible" in lines["_testsinglephase"]
    assert "not found" in lines["no_such_module_xyz"]


@pytest.mark.timeout(120)
def test_doctor_ok_exit_status():
    proc = cli("doctor", "json", "re")
    assert proc.returncode == 0, proc.stdout + proc.stderr


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
