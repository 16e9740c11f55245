"""Crash hunt: workers import, for the first time and all at once, every importable
standard-library module (and its direct submodules) and every package of the test
extra, make a cheap real call where there is one, then the pool shuts down.  Each
repetition is a fresh process; a crash is a process that died on a signal, or
ended without its closing line.

    python scripts/crash_hunt.py [--reps N] [--workers 2,4] [--seed S]

Prints one line per (workers) with runs and crashes, and exits 1 if any run
crashed.  ``nox -s crashhunt`` runs it long; the test suite runs it short
(tests/test_crashes.py).
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import random
import subprocess
import sys
import time
from typing import Any

#: Modules whose import has effects beyond the process (a browser, a window),
#: or that run a program when imported, or are test suites.
SKIP = {
    "antigravity",
    "this",
    "idlelib",
    "turtle",
    "turtledemo",
    "tkinter",
    "test",
    "ensurepip",
    "pydoc_data",
    "lib2to3",
    "msvcrt",
    "winreg",
    "winsound",
    "nt",
    "_winapi",
}

#: The import names of the test extra's distributions (pyproject.toml).
TEST_EXTRA = [
    "pytest",
    "pytest_timeout",
    "anyio",
    "trio",
    "cloudpickle",
    "numpy",
    "distributed",
    "starlette",
    "uvicorn",
]


def module_names() -> list[str]:
    names: list[str] = []
    for top in sorted(sys.stdlib_module_names):
        if top.startswith("_") or top in SKIP:
            continue
        names.append(top)
        spec = importlib.util.find_spec(top) if top not in sys.builtin_module_names else None
        if spec is not None and spec.submodule_search_locations:
            for info in pkgutil.iter_modules(spec.submodule_search_locations):
                if info.name == "__main__" or info.name.startswith("_") or info.name in ("tests", "test"):
                    continue
                names.append(f"{top}.{info.name}")
    return names + TEST_EXTRA


def _calls() -> dict[str, Any]:
    """A cheap real call per module, where there is an obvious one."""
    return {
        "json": lambda m: m.loads(m.dumps({"a": [1, 2.5, None]})),
        "re": lambda m: m.match(r"(\w+)@(\w+)", "a@b").groups(),
        "datetime": lambda m: m.datetime(2024, 1, 2, tzinfo=m.timezone.utc).isoformat(),
        "decimal": lambda m: str(m.Decimal("1.1") + m.Decimal("2.2")),
        "fractions": lambda m: str(m.Fraction(1, 3) * 3),
        "hashlib": lambda m: m.sha256(b"x").hexdigest(),
        "zlib": lambda m: m.decompress(m.compress(b"x" * 100)),
        "email.utils": lambda m: m.formatdate(0, usegmt=True),
        "tomllib": lambda m: m.loads('a = 1\nb = "x"\nd = 1979-05-27T07:32:00Z'),
        "sqlite3": lambda m: m.connect(":memory:").execute("select 1 + 1").fetchone(),
        "xml.etree.ElementTree": lambda m: m.fromstring("<a><b>x</b></a>").find("b").text,
        "statistics": lambda m: m.mean([1, 2, 3, 4]),
        "unicodedata": lambda m: m.name("é"),
        "ipaddress": lambda m: str(m.ip_network("10.0.0.0/8").num_addresses),
        "urllib.parse": lambda m: m.urlsplit("http://x/y?z=1").query,
        "csv": lambda m: list(m.reader(["a,b", "1,2"])),
        "struct": lambda m: m.unpack("<i", m.pack("<i", 7)),
        "pickle": lambda m: m.loads(m.dumps({"k": (1, 2)})),
        "base64": lambda m: m.b64decode(m.b64encode(b"x")),
        "uuid": lambda m: m.uuid5(m.NAMESPACE_DNS, "x").hex,
        "difflib": lambda m: list(m.unified_diff(["a"], ["b"])),
        "textwrap": lambda m: m.wrap("a b c " * 10, 20),
        "calendar": lambda m: m.monthrange(2024, 2),
        "gzip": lambda m: m.decompress(m.compress(b"x")),
        "bz2": lambda m: m.decompress(m.compress(b"x")),
        "lzma": lambda m: m.decompress(m.compress(b"x")),
        "html.parser": lambda m: m.HTMLParser().feed("<p>x</p>"),
        "string": lambda m: m.Template("$a").substitute(a=1),
    }


def hunt(names: list[str], seed: int) -> tuple[int, int, int]:
    """In a worker: import every module (in a shuffled order), call where cheap.
    Returns (imported, refused, failed calls)."""
    order = list(names)
    random.Random(seed).shuffle(order)
    calls = _calls()
    imported = refused = failed = 0
    for name in order:
        try:
            module = importlib.import_module(name)
        except BaseException:  # refusals (ImportError), missing optional deps, SystemExit from a script
            refused += 1
            continue
        imported += 1
        call = calls.get(name)
        if call is not None:
            try:
                call(module)
            except Exception:
                failed += 1
    return imported, refused, failed


def child(workers: int, seed: int) -> None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from interpexec import InterpreterPoolExecutor

    names = module_names()
    with InterpreterPoolExecutor(workers) as ex:
        ex.prestart()
        futures = [ex.submit(hunt, names, seed + i) for i in range(workers)]
        results = [f.result() for f in futures]
    print("ok", workers, len(names), results, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--workers", default="2,4")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--child", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.seed)
        return 0
    crashed = 0
    version = "%d.%d.%d" % sys.version_info[:3]
    for workers in (int(w) for w in args.workers.split(",")):
        crashes = 0
        t0 = time.monotonic()
        for rep in range(args.reps):
            seed = args.seed * 1000 + rep
            proc = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--child", str(workers), "--seed", str(seed)],
                capture_output=True,
                text=True,
                timeout=300,
            )
            if proc.returncode != 0 or not proc.stdout.startswith("ok "):
                crashes += 1
                print(f"CRASH python {version}, {workers} workers, seed {seed}: exit {proc.returncode}", flush=True)
                print(proc.stderr[-3000:], file=sys.stderr, flush=True)
        crashed += crashes
        print(
            f"python {version}: {workers} workers, {args.reps} runs, {crashes} crashes ({time.monotonic() - t0:.0f} s)",
            flush=True,
        )
    return 1 if crashed else 0


if __name__ == "__main__":
    sys.exit(main())
