"""``interpexec bench`` (the installed self-check) and ``benchmarks/bench.py`` (the
full benchmark, in the repository): quick runs, --help, bad arguments, and no
bytecode written where PYTHONDONTWRITEBYTECODE forbids it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIGURES = ("cold_start_s", "round_trip_us", "throughput_tps", "cpu_speedup")


def run(
    cmd: list[str], timeout: float = 60, path: str = ROOT, cwd: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    environ = dict(os.environ, PYTHONPATH=path + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=environ, cwd=cwd)


def cli(*args: str, timeout: float = 60, **kwargs: str) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "interpexec", *args], timeout=timeout, **kwargs)


def bench_py(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, os.path.join(ROOT, "benchmarks", "bench.py"), *args], timeout=timeout)


@pytest.mark.timeout(240)
def test_quick_self_check_measures_every_executor_this_python_has(tmp_path):
    report_path = tmp_path / "bench.json"
    proc = cli("bench", "--quick", "--json", str(report_path), timeout=200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    header = next(line for line in proc.stdout.splitlines() if line.startswith("| metric"))
    assert [cell.strip() for cell in header.split("|")[1:-1]] == ["metric", "process", "thread", "stdlib", "interpexec"]
    for label in ("cold start, 2 workers", "round trip", "500 no-op submits", "speedup on CPU-bound"):
        assert sum(line.startswith(f"| {label}") for line in proc.stdout.splitlines()) == 1, label
    report = json.loads(report_path.read_text())
    expected = {"process", "thread", "interpexec"} | ({"stdlib"} if sys.version_info >= (3, 14) else set())
    assert set(report["figures"]) == expected
    assert report["errors"] == {}
    for kind in expected:
        assert sorted(report["figures"][kind]) == sorted(FIGURES), kind
        assert all(value > 0 for value in report["figures"][kind].values()), kind
    if sys.version_info < (3, 14):
        assert "3.14" in report["unavailable"]["stdlib"]
        row = next(line for line in proc.stdout.splitlines() if line.startswith("| round trip"))
        assert row.split("|")[4].strip() == "n/a"  # the stdlib column


@pytest.mark.timeout(60)
def test_a_failing_child_is_reported_not_raised():
    from interpexec import _bench

    figures, error = _bench._measure("nosuchpool", ["2", "10", "10", "10"])
    assert figures == {}
    assert error is not None and error.startswith("exit status 1:") and "unknown executor 'nosuchpool'" in error


@pytest.mark.timeout(240)
def test_bench_writes_no_bytecode_when_told_not_to(tmp_path):
    """A fresh copy of the package, as an installation without caches would be:
    with PYTHONDONTWRITEBYTECODE set, neither the bench, its children nor their
    workers (processes and interpreters) write a __pycache__ into it."""
    site = tmp_path / "site"
    shutil.copytree(os.path.join(ROOT, "interpexec"), site / "interpexec", ignore=shutil.ignore_patterns("__pycache__"))
    files = sorted(os.listdir(site / "interpexec"))
    where = run(
        [sys.executable, "-c", "import interpexec; print(interpexec.__file__)"],
        path=str(site),
        cwd=str(tmp_path),
        PYTHONDONTWRITEBYTECODE="1",
    )
    assert where.stdout.strip() == str(site / "interpexec" / "__init__.py")
    proc = cli("bench", "--quick", timeout=200, path=str(site), cwd=str(tmp_path), PYTHONDONTWRITEBYTECODE="1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "lack a bytecode cache" in proc.stdout  # the note on the cost
    assert [str(p) for p in tmp_path.rglob("__pycache__")] == []
    assert [str(p) for p in tmp_path.rglob("*.pyc")] == []
    assert sorted(os.listdir(site / "interpexec")) == files


@pytest.mark.timeout(60)
def test_bench_help_lists_options_and_figures():
    proc = cli("bench", "--help")
    assert proc.returncode == 0
    for text in ("usage:", "--workers", "--quick", "--json", "--executors", "cold start", "benchmarks/bench.py"):
        assert text in proc.stdout


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "args",
    [
        ("--workers", "0"),
        ("--workers", "two"),
        ("--executors", "interpexec,nosuchpool"),
        ("--executors", ","),
        ("--rounds", "2"),  # the full benchmark's option, not the self-check's
        ("--no-such-option",),
    ],
)
def test_bench_bad_arguments_exit_2_with_one_line_error(args):
    proc = cli("bench", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, proc.stderr
    assert proc.stdout == ""


@pytest.mark.timeout(240)
def test_full_benchmark_quick_run(tmp_path):
    """benchmarks/bench.py, the harness moved out of the package, still measures."""
    report_path = tmp_path / "bench.json"
    proc = bench_py("--quick", "--executors", "interpexec,thread", "--json", str(report_path), timeout=200)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "resident memory per worker (MB)" in proc.stdout
    assert f"results: {report_path}" in proc.stdout
    assert "100%" in proc.stderr  # the progress bar reached the end
    report = json.loads(report_path.read_text())
    assert report["executors"] == ["thread", "interpexec"]
    for kind in ("thread", "interpexec"):
        for metric in ("cold_start_s", "round_trip_us", "throughput_tps", "map_ips", "cpu_speedup", "echo_ms"):
            assert report["median"][kind][metric] is not None, (kind, metric, report["notes"])


@pytest.mark.timeout(240)
def test_full_benchmark_scaling_and_cold_start_rows(tmp_path):
    """--scaling measures by worker count and by queued tasks; the main table has
    the fresh-process cold start and interpexec's memory floor."""
    report_path = tmp_path / "bench.json"
    proc = bench_py(
        "--quick",
        "--executors",
        "interpexec,thread",
        "--scaling",
        "--scaling-workers",
        "1,2",
        "--scaling-tasks",
        "200,1000",
        "--json",
        str(report_path),
        timeout=200,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for text in ("cold start incl. import", "floor: bare subinterpreter", "how cost grows", "peak memory per task"):
        assert text in proc.stdout, text
    assert "--plot PATH draws these curves" in proc.stdout
    report = json.loads(report_path.read_text())
    assert report["median"]["interpexec"]["cold_import_s"] > 0
    assert report["median"]["thread"]["cold_import_s"] > 0
    assert report["median"]["interpexec"]["bare_mb_per_interp"] > 0
    summary = report["scaling"]["summary"]
    for kind in ("interpexec", "thread"):
        assert sorted(summary["workers"][kind]) == ["1", "2"]
        assert all(summary["workers"][kind][w]["throughput_tps"] > 0 for w in ("1", "2"))
        assert sorted(summary["queued"][kind], key=int) == ["200", "1000"]
        assert summary["queued"][kind]["1000"]["peak_bytes_per_task"] >= 0
    assert [t["metric"] for t in report["scaling"]["targets"]][1].startswith("peak memory per queued task")


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "args",
    [
        ("--workers", "0"),
        ("--rounds", "-1"),
        ("--executors", ","),
        ("--timeout", "0"),
        ("--scaling-workers", "0,2"),
        ("--scaling-tasks", "many"),
    ],
)
def test_full_benchmark_bad_arguments_exit_2(args):
    proc = bench_py(*args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert [line for line in proc.stderr.splitlines() if "error:" in line] != []


@pytest.mark.timeout(60)
def test_full_benchmark_plot_without_matplotlib_fails_at_once(tmp_path):
    # Whether or not matplotlib is installed here, the benchmark must see it missing.
    hidden = tmp_path / "hide" / "matplotlib"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('hidden by the test')\n")
    script = os.path.join(ROOT, "benchmarks", "bench.py")
    proc = run(
        [sys.executable, script, "--quick", "--plot", str(tmp_path / "plot.png")],
        path=f"{hidden.parent}{os.pathsep}{ROOT}",
    )
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "matplotlib" in errors[0], proc.stderr
    assert not (tmp_path / "plot.png").exists()
