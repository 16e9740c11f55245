"""docs/compatibility.md, generated: popular PyPI packages inside interpexec workers.

    python scripts/compat_table.py install             (into the running venv)
    python scripts/compat_table.py probe OUT.json      (in a venv with the packages)
    python scripts/compat_table.py render IN.json... [--out docs/compatibility.md]

``probe`` takes each package of PACKAGES that is installed, runs
``python -m interpexec doctor`` on it (works / degraded / refuses / crash) and
makes one real call (scripts/compat_calls.py) in a fresh worker interpreter and
in the main interpreter, each in a fresh process, recording whether the results
agree.  ``render`` merges the JSON of several Pythons into the page.
``nox -s compat`` (and ``./dev compat`` for the chroot's Pythons) does both.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import subprocess
import sys
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

#: (distribution, function in compat_calls making one real call)
PACKAGES = [
    ("numpy", "numpy"),
    ("pandas", "pandas"),
    ("scipy", "scipy"),
    ("pydantic", "pydantic"),
    ("orjson", "orjson"),
    ("lxml", "lxml"),
    ("pillow", "pillow"),
    ("cryptography", "cryptography"),
    ("pyyaml", "pyyaml"),
    ("msgpack", "msgpack"),
    ("simplejson", "simplejson"),
    ("ujson", "ujson"),
    ("regex", "regex"),
    ("requests", "requests"),
    ("charset-normalizer", "charset_normalizer"),
    ("jinja2", "jinja2"),
    ("markupsafe", "markupsafe"),
    ("markdown", "markdown"),
    ("docutils", "docutils"),
    ("pygments", "pygments"),
    ("sympy", "sympy"),
    ("networkx", "networkx"),
    ("attrs", "attrs"),
    ("python-dateutil", "python_dateutil"),
    ("pytz", "pytz"),
    ("sqlalchemy", "sqlalchemy"),
    ("zstandard", "zstandard"),
    ("lz4", "lz4"),
    ("xxhash", "xxhash"),
    ("tqdm", "tqdm"),
    ("click", "click"),
    ("rich", "rich"),
    ("toolz", "toolz"),
    ("more-itertools", "more_itertools"),
    ("idna", "idna"),
    ("urllib3", "urllib3"),
    ("six", "six"),
    ("packaging", "packaging"),
    ("pyparsing", "pyparsing"),
    ("psutil", "psutil"),
    ("joblib", "joblib"),
    ("cloudpickle", "cloudpickle"),
    ("sortedcontainers", "sortedcontainers"),
    ("beautifulsoup4", "beautifulsoup4"),
    ("mpmath", "mpmath"),
    ("protobuf", "protobuf"),
    ("cffi", "cffi"),
    ("rapidfuzz", "rapidfuzz"),
]

CALL_SCRIPT = """
import json, sys
sys.path[:0] = [{here!r}, {root!r}]
from interpexec import InterpreterPoolExecutor
import compat_calls

def main():
    fn = getattr(compat_calls, sys.argv[1])
    out = {{}}
    with InterpreterPoolExecutor(1) as ex:
        try:
            out["worker"] = ["ok", repr(ex.submit(fn).result(timeout=120))]
        except BaseException as exc:
            first = (str(exc).splitlines() or [""])[0][:200]
            out["worker"] = ["error", type(exc).__name__ + ": " + first, getattr(exc, "module", None)]
    try:
        out["parent"] = ["ok", repr(fn())]
    except BaseException as exc:
        out["parent"] = ["error", type(exc).__name__ + ": " + (str(exc).splitlines() or [""])[0][:200], None]
    print(json.dumps(out))

if __name__ == "__main__":
    main()
"""


def _call(function: str) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", CALL_SCRIPT.format(here=HERE, root=ROOT), function],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if proc.returncode != 0:
        return {"verdict": "crash", "detail": f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}"}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    worker, parent = out["worker"], out["parent"]
    if parent[0] != "ok":
        return {"verdict": "fails in the parent too", "detail": parent[1]}
    if worker[0] != "ok":
        return {"verdict": "fails in a worker", "detail": worker[1], "module": worker[2]}
    if worker[1] == parent[1]:
        return {"verdict": "same"}
    return {"verdict": "differs", "detail": f"worker {worker[1][:80]} / parent {parent[1][:80]}"}


def probe(out_path: str) -> int:
    sys.path.insert(0, ROOT)
    installed = []
    rows: list[dict[str, Any]] = []
    for dist, function in PACKAGES:
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            rows.append({"name": dist, "version": "", "state": "not installed", "modules": [], "call": {}})
            continue
        installed.append((dist, function, version))
    doctor = subprocess.run(
        [sys.executable, "-m", "interpexec", "doctor", "--json", *(d for d, _, _ in installed)],
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, PYTHONPATH=ROOT),
    )
    reports = {r["name"]: r for r in json.loads(doctor.stdout)["packages"]}
    for dist, function, version in installed:
        report = reports.get(dist, {"state": "error", "modules": [], "detail": "no report"})
        rows.append(
            {
                "name": dist,
                "version": version,
                "state": report["state"],
                "modules": report["modules"],
                "detail": report.get("detail", ""),
                "call": _call(function),
            }
        )
        print(f"{dist:<20} {version:<12} {report['state']:<9} {rows[-1]['call']['verdict']}", flush=True)
    order = {d: i for i, (d, _) in enumerate(PACKAGES)}
    rows.sort(key=lambda r: order[r["name"]])
    data = {
        "python": "%d.%d.%d" % sys.version_info[:3],
        "date": datetime.date.today().isoformat(),
        "interpexec": __import__("interpexec").__version__,
        "packages": rows,
    }
    with open(out_path, "w") as f:
        json.dump(data, f, indent=1)
    return 0


def _cell(row: dict[str, Any] | None) -> str:
    if row is None or row["state"] == "not installed":
        return "not installable"
    state = row["state"]
    text = f"**{state}**" if state in ("refuses", "crash") else state
    if row["modules"] and state in ("refuses", "degraded"):
        shown = ", ".join(f"`{m}`" for m in row["modules"][:3])
        text += f" ({shown}{', ...' if len(row['modules']) > 3 else ''})"
    verdict = row["call"].get("verdict", "")
    if verdict == "same":
        text += "; call: same result"
    elif verdict:
        text += f"; call: {verdict}"
    return text


def render(paths: list[str], out: str) -> int:
    runs = [json.load(open(p)) for p in paths]
    runs.sort(key=lambda r: tuple(int(x) for x in r["python"].split(".")))
    by_name = [{row["name"]: row for row in run["packages"]} for run in runs]
    lines = [
        "# Compatibility of popular packages",
        "",
        "<!-- Generated by scripts/compat_table.py (nox -s compat); do not edit by hand. -->",
        "",
        "Each package was checked with `python -m interpexec doctor` (its modules and every",
        "compiled extension it ships, imported in a fresh worker interpreter) and by one real",
        "call (`scripts/compat_calls.py`) made in a worker and in the main interpreter, each",
        "in a fresh process. States: **works**; **degraded** (imports, but an optional",
        "compiled accelerator did not load and the package fell back to slower or reduced",
        "code); **refuses** (a module refuses isolated subinterpreters: code that needs it",
        "fails with `IncompatibleModuleError`; use a process pool for it). `call: same result`",
        "means the worker's result equals the parent's; `differs` is a silent difference.",
        "",
        "Checked on "
        + ", ".join(f"Python {r['python']} ({r['date']})" for r in runs)
        + f", interpexec {runs[0]['interpexec'] if runs else ''}, Linux x86-64.",
        "",
        "| package | versions | " + " | ".join(f"Python {r['python']}" for r in runs) + " |",
        "|---|---|" + "---|" * len(runs),
    ]
    names = []
    for run in runs:
        for row in run["packages"]:
            if row["name"] not in names:
                names.append(row["name"])
    for name in names:
        versions = sorted({b[name]["version"] for b in by_name if name in b and b[name]["version"]})
        cells = [_cell(b.get(name)) for b in by_name]
        lines.append(f"| {name} | {', '.join(versions)} | " + " | ".join(cells) + " |")
    summary = []
    for run in runs:
        counts: dict[str, int] = {}
        for row in run["packages"]:
            counts[row["state"]] = counts.get(row["state"], 0) + 1
        summary.append(f"- Python {run['python']}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())))
    lines += ["", "Totals:", "", *summary, ""]
    differing = [
        (run["python"], row["name"], row["call"].get("detail", ""))
        for run in runs
        for row in run["packages"]
        if row.get("call", {}).get("verdict") == "differs"
    ]
    if differing:
        lines += ["Calls whose result differs in a worker:", ""]
        lines += [f"- {name} on Python {py}: {detail}" for py, name, detail in differing]
        lines.append("")
    with open(out, "w") as f:
        f.write("\n".join(lines))
    return 0


def install() -> int:
    """Install each package (binary wheels only: a package without one for this
    Python is reported as not installable) into the running environment."""
    for dist, _ in PACKAGES:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "--only-binary",
                ":all:",
                dist,
            ],
            capture_output=True,
            text=True,
        )
        print(f"{dist:<20} {'installed' if proc.returncode == 0 else 'NOT INSTALLABLE'}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="cmd", required=True)
    sub.add_parser("install")
    p = sub.add_parser("probe")
    p.add_argument("out")
    r = sub.add_parser("render")
    r.add_argument("inputs", nargs="+")
    r.add_argument("--out", default=os.path.join(ROOT, "docs", "compatibility.md"))
    args = parser.parse_args(argv)
    if args.cmd == "install":
        return install()
    if args.cmd == "probe":
        return probe(args.out)
    return render(args.inputs, args.out)


if __name__ == "__main__":
    sys.exit(main())
