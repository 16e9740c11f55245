"""Sessions: ``nox -s tests-3.13`` (per Python), ``stress-3.13`` (the randomised stress
test, long), ``crashhunt-3.13``, ``compat-3.13``, ``bench``, ``demo``, ``lint``, ``docs``,
``package``.

Use ``./dev`` for the full matrix: it adds the Debian unstable chroot that carries
3.14 and 3.15 on machines whose own Pythons stop at 3.13.
"""

from __future__ import annotations

import glob
import os
import shutil
import tarfile

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests", "lint"]

PYTHONS = ["3.13", "3.14", "3.15"]


def _available(versions: list[str]) -> list[str]:
    return [v for v in versions if shutil.which(f"python{v}")]


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """The test suite on one Python version."""
    session.install("-e", ".[test]")
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session(python=PYTHONS)
def stress(session: nox.Session) -> None:
    """The seeded randomised stress test, run long (INTERPEXEC_STRESS_SECONDS,
    default 120 here; CI runs a short one as part of the suite)."""
    session.install("-e", ".[test]")
    env = {"INTERPEXEC_STRESS_SECONDS": os.environ.get("INTERPEXEC_STRESS_SECONDS", "120")}
    session.run("python", "-m", "pytest", "-s", "tests/test_stress.py", "--timeout", "900", *session.posargs, env=env)


@nox.session(python=PYTHONS)
def crashhunt(session: nox.Session) -> None:
    """Workers importing the whole standard library and the test extra at once,
    in fresh processes (50 per worker count unless given ``-- --reps N``)."""
    session.install("-e", ".[test]")
    session.run("python", "scripts/crash_hunt.py", *(session.posargs or ["--reps", "50"]))


@nox.session(python=PYTHONS)
def compat(session: nox.Session) -> None:
    """Probe popular PyPI packages in workers (docs/compatibility.md's data for this
    Python: docs/compat/compat-X.Y.json); then ``python scripts/compat_table.py
    render docs/compat/*.json`` writes the page."""
    session.install("-e", ".")
    session.run("python", "scripts/compat_table.py", "install")
    session.run("python", "scripts/compat_table.py", "probe", f"docs/compat/compat-{session.python}.json")


@nox.session(python=_available(PYTHONS) or PYTHONS[0])
def bench(session: nox.Session) -> None:
    """The comparison benchmark (table on stdout, JSON in benchmarks/results/)."""
    session.install("-e", ".")
    if any(arg.startswith("--plot") for arg in session.posargs):
        session.install("matplotlib")  # (only --plot draws)
    session.run("python", "benchmarks/bench.py", *session.posargs)


@nox.session(python=_available(PYTHONS) or PYTHONS[0])
def demo(session: nox.Session) -> None:
    """CPU-bound pure Python: serial vs ProcessPoolExecutor vs interpexec."""
    session.install("-e", ".")
    session.run("python", "-m", "interpexec", "demo", *session.posargs)


@nox.session(python=_available(PYTHONS)[:1] or PYTHONS[0])
def lint(session: nox.Session) -> None:
    """ruff check, ruff format --check, mypy --strict."""
    session.install("-e", ".[test]", "ruff", "mypy")
    paths = [p for p in ("interpexec", "tests", "benchmarks", "examples", "scripts", "noxfile.py") if os.path.exists(p)]
    session.run("ruff", "check", *paths)
    session.run("ruff", "format", "--check", *paths)
    session.run("mypy", "--strict", "interpexec")


@nox.session(python=_available(PYTHONS)[:1] or PYTHONS[0], reuse_venv=False)
def docs(session: nox.Session) -> None:
    """The Sphinx site as docs/requirements.txt documents it (a fresh venv, warnings
    as errors, an empty output folder); then every API section must have entries."""
    session.install("-r", "docs/requirements.txt")
    shutil.rmtree("docs/_build/html", ignore_errors=True)
    session.run("sphinx-build", "-W", "--keep-going", "-b", "html", "docs", "docs/_build/html")
    session.run("python", "-m", "tests.docs_helpers", "check-api", "docs/_build/html")


@nox.session(python=_available(PYTHONS)[:1] or PYTHONS[0])
def package(session: nox.Session) -> None:
    """The sdist and the wheel, built into an empty folder: both carry LICENSE, and
    the sdist everything its tests and noxfile.py use; some of those tests then run
    from the unpacked sdist."""
    session.install("build")
    tmp = session.create_tmp()
    out, unpacked = os.path.join(tmp, "dist"), os.path.join(tmp, "sdist")
    for folder in (out, unpacked):
        shutil.rmtree(folder, ignore_errors=True)
    session.run("python", "-m", "build", "--outdir", out)
    session.run("python", "-m", "tests.docs_helpers", "check-dist", out)
    (sdist,) = glob.glob(os.path.join(out, "*.tar.gz"))
    with tarfile.open(sdist) as tar:
        tar.extractall(unpacked, filter="data")
    src = os.path.join(unpacked, os.path.basename(sdist)[: -len(".tar.gz")])
    session.install(f"{src}[test]")
    session.chdir(src)
    session.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_docs.py", "tests/test_cli.py")
