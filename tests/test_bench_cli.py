"""python -m interpexec bench: a quick smoke run, --help and bad arguments."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cli(*args: str, timeout: float = 60, path: str = ROOT) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=path + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", "interpexec", *args], capture_output=True, text=True, timeout=timeout, env=env
    )


@pytest.mark.timeout(240)
def test_quick_bench_runs_both_executors(tmp_path):
    report_path = tmp_path / "bench.json"
    proc = cli("bench", "--quick", "--executors", "interpexec,thread", "--json", str(report_path), timeout=200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "| metric" in proc.stdout
    assert "resident memory per worker (MB)" in proc.stdout
    assert f"results: {report_path}" in proc.stdout
    assert "100%" in proc.stderr  # the progress bar reached the end
    report = json.loads(report_path.read_text())
    assert report["executors"] == ["thread", "interpexec"]
    assert report["quick"] is True
    for kind in ("thread", "interpexec"):
        for metric in ("cold_start_s", "round_trip_us", "throughput_tps", "map_ips", "cpu_speedup", "echo_ms"):
            assert report["median"][kind][metric] is not None, (kind, metric, report["notes"])
    assert report["median"]["interpexec"]["throughput_tps"] > 0


@pytest.mark.timeout(60)
def test_bench_help_lists_options_and_metrics():
    proc = cli("bench", "--help")
    assert proc.returncode == 0
    for text in ("usage:", "--workers", "--rounds", "--quick", "--json", "--plot", "--executors", "cold start"):
        assert text in proc.stdout


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "args",
    [
        ("--workers", "0"),
        ("--workers", "two"),
        ("--rounds", "-1"),
        ("--executors", "interpexec,nosuchpool"),
        ("--executors", ","),
        ("--timeout", "0"),
        ("--no-such-option",),
    ],
)
def test_bench_bad_arguments_exit_2_with_one_line_error(args):
    proc = cli("bench", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, proc.stderr
    assert proc.stdout == ""


@pytest.mark.timeout(60)
def test_bench_plot_without_matplotlib_fails_at_once(tmp_path):
    # Whether or not matplotlib is installed here, the CLI must see it missing.
    hidden = tmp_path / "hide" / "matplotlib"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    proc = cli("bench", "--quick", "--plot", str(tmp_path / "plot.png"), path=f"{tmp_path / 'hide'}{os.pathsep}{ROOT}")
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0  # one line
    assert "matplotlib" in proc.stderr and "interpexec[plot]" in proc.stderr
    assert not (tmp_path / "plot.png").exists()
