"""Every example in examples/ runs as a script (with small sizes) and succeeds."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")

# script -> (arguments for a quick run, text its output must contain)
CASES = {
    "quickstart.py": ((), "1229"),
    "cpu_bound.py": (("300",), "interpexec"),
    "shared_numpy.py": (("20000",), "transformed 20,000 floats"),
    "timeouts.py": ((), "interrupted: the future is cancelled"),
    "worker_logging.py": ((), "[0, 1, 4, 9]"),
    "pipeline.py": (("300",), "300 documents in"),
    # starts examples/web_service.py itself and drives it on loopback
    "load_test.py": (
        ("--modes", "interpexec", "--duration", "2", "--client", "python", "--n", "5000"),
        "| interpexec |",
    ),
}


def test_every_example_is_listed():
    scripts = {f for f in os.listdir(EXAMPLES) if f.endswith(".py") and not f.startswith("_")}
    assert scripts <= set(CASES) | set(EXTRA_CASES), (
        f"examples without a test: {scripts - set(CASES) - set(EXTRA_CASES)}"
    )


# Examples run by other tests: the web service is started and driven by
# load_test.py; dask_cluster.py by tests/test_dask.py::test_example_script (which
# also checks where its tasks ran).
EXTRA_CASES: dict[str, tuple[tuple[str, ...], str]] = {
    "web_service.py": ((), ""),
    "dask_cluster.py": ((), "primes below 640,000"),
}


@pytest.mark.timeout(10)
@pytest.mark.parametrize("script", sorted(set(CASES) | set(EXTRA_CASES)))
def test_example_has_a_header_docstring(script):
    with open(os.path.join(EXAMPLES, script)) as f:
        header = f.read(400)
    assert header.startswith('"""'), f"{script} needs a header docstring saying what it shows"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("script", sorted(CASES))
def test_example_runs(script):
    args, expected = CASES[script]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(
        [sys.executable, os.path.join(EXAMPLES, script), *args],
        capture_output=True,
        text=True,
        timeout=110,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert expected in proc.stdout + proc.stderr
