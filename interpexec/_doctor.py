"""``python -m interpexec doctor``: will each installed package work in a worker?

For each distribution (or module named on the command line) it probes the
top-level modules and every compiled extension module the distribution ships,
each distribution in a fresh worker interpreter, and compares with what a normal
import loads in a main interpreter.  States:

* ``works``: everything imports in a worker;
* ``degraded``: the package imports, but an optional accelerator (an extension
  module a normal import loads) refused or failed to load and the package fell
  back: it works, slower or with less (named in the report);
* ``refuses``: a module of the package refuses isolated subinterpreters (the
  fully dotted name is given): code that needs it fails with
  ``IncompatibleModuleError``;
* ``crash``: probing it crashed the interpreter (and the whole process: the
  probes run in a child process, which is restarted for the rest);
* ``error``: the import failed otherwise (see detail), ``not found``: no such
  distribution or module.
"""

from __future__ import annotations

import importlib.machinery
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any, TextIO

__all__ = ["Target", "diagnose", "run_doctor", "targets_for"]

STATES = ("works", "degraded", "refuses", "crash", "error", "not found")


class Target:
    """One thing to probe: a distribution, or a bare module."""

    def __init__(self, key: str, version: str, tops: list[str], extensions: list[str]) -> None:
        self.key = key
        self.version = version
        self.tops = tops
        self.extensions = extensions

    def wire(self) -> str:
        return json.dumps({"key": self.key, "tops": self.tops, "extensions": self.extensions})


def _extension_modules(dist: importlib.metadata.Distribution, tops: list[str]) -> list[str]:
    suffixes = sorted(importlib.machinery.EXTENSION_SUFFIXES, key=len, reverse=True)
    found = set()
    for f in dist.files or ():
        path = str(f)
        for suffix in suffixes:
            if path.endswith(suffix):
                dotted = path[: -len(suffix)].replace("/", ".").replace("\\", ".")
                if dotted.partition(".")[0] in tops and all(p.isidentifier() for p in dotted.split(".")):
                    found.add(dotted)
                break
    return sorted(found)


def _tops(dist: importlib.metadata.Distribution, by_top: Mapping[str, list[str]]) -> list[str]:
    name = dist.metadata["Name"] or ""
    tops = sorted(
        top for top, dists in by_top.items() if name in dists and top.isidentifier() and not top.startswith("_")
    )
    if not tops:  # only private top-level modules (a C accelerator shipped alone)
        tops = sorted(top for top, dists in by_top.items() if name in dists and top.isidentifier())
    return tops


def _all_tops(dist: importlib.metadata.Distribution, by_top: Mapping[str, list[str]]) -> list[str]:
    """Every top-level name the distribution provides, private ones included
    (cffi's ``_cffi_backend``)."""
    name = dist.metadata["Name"] or ""
    return sorted(top for top, dists in by_top.items() if name in dists)


def targets_for(names: list[str]) -> tuple[list[Target], list[str]]:
    """Targets for the names given (distributions or modules), or for every
    installed distribution; and the names that were not found."""
    by_top = importlib.metadata.packages_distributions()
    targets: list[Target] = []
    missing: list[str] = []
    if not names:
        seen = set()
        for dist in importlib.metadata.distributions():
            name = dist.metadata["Name"]
            if not name or name.lower() in seen:
                continue
            seen.add(name.lower())
            tops = _tops(dist, by_top)
            if tops:
                targets.append(Target(name, dist.version, tops, _extension_modules(dist, _all_tops(dist, by_top))))
        return sorted(targets, key=lambda t: t.key.lower()), missing
    for name in names:
        if not name.strip() or not all(part.isidentifier() for part in name.replace("-", "_").split(".")):
            missing.append(name)  # not a distribution or module name at all
            continue
        try:
            dist = importlib.metadata.distribution(name)
        except (importlib.metadata.PackageNotFoundError, ValueError):
            dists = by_top.get(name)
            if dists:
                dist = importlib.metadata.distribution(dists[0])
            else:
                try:
                    spec = importlib.util.find_spec(name)
                except (ImportError, ValueError):
                    spec = None
                if spec is None:
                    missing.append(name)
                else:
                    targets.append(Target(name, "", [name], []))
                continue
        tops = _tops(dist, by_top) or [name]
        targets.append(Target(name, dist.version, tops, _extension_modules(dist, _all_tops(dist, by_top) + tops)))
    return targets, missing


#: Seconds one probe may take (an import that blocks is reported, not waited for).
PROBE_TIMEOUT = 20.0


def _run_child(mode: str, targets: list[Target]) -> tuple[dict[str, dict[str, Any]], list[str], bool]:
    """Results by key, the keys started but without a result, and whether the
    child died (or hung, or exited without saying it was done)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "interpexec._doctor_probe", mode, str(PROBE_TIMEOUT)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p)),
    )
    # Probes run two at a time in workers, one at a time otherwise; each has a
    # deadline, but a call stuck in C outlives it: the child is then killed.
    budget = 10 + PROBE_TIMEOUT * (len(targets) if mode != "workers" else (len(targets) + 1) // 2 + 1)
    try:
        out, _ = proc.communicate("".join(t.wire() + "\n" for t in targets), timeout=budget)
        hung = False
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        hung = True
    results: dict[str, dict[str, Any]] = {}
    started: list[str] = []
    done = False
    for line in out.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("done"):
            done = True
        elif record.pop("started", False):
            started.append(record["key"])
        else:
            results[record["key"]] = record
    unfinished = [k for k in started if k not in results]
    return results, unfinished, hung or proc.returncode != 0 or not done or bool(unfinished)


def _probe_all(mode: str, targets: list[Target]) -> tuple[dict[str, dict[str, Any]], set[str]]:
    """Probe every target; a crash is pinned on its target by re-running the
    unfinished ones one at a time in fresh children."""
    results, unfinished, died = _run_child(mode, targets)
    crashed: set[str] = set()
    pending = [t for t in targets if t.key not in results]
    for _ in range(len(targets) + 1):  # each round settles one target at least, or stops
        if not pending or not (died or unfinished):
            break
        res, unfinished, died = _run_child("serial" if mode == "workers" else mode, pending)
        results.update(res)
        if not res and not unfinished:
            break  # the child fails before probing anything: nothing more to learn
        if died and unfinished:
            crashed.add(unfinished[-1])  # one at a time: the last one started
        pending = [t for t in pending if t.key not in results and t.key not in crashed]
    return results, crashed


def _probe_parents(targets: list[Target]) -> dict[str, dict[str, Any]]:
    """The baseline of each target, each in a fresh process (two at a time)."""
    from concurrent.futures import ThreadPoolExecutor

    results: dict[str, dict[str, Any]] = {}
    with ThreadPoolExecutor(2) as pool:
        for res, _, _ in pool.map(lambda t: _run_child("parent", [t]), targets):
            results.update(res)
    return results


def diagnose(
    target: Target, worker: dict[str, Any] | None, parent: dict[str, Any] | None, crashed: bool
) -> dict[str, Any]:
    """The state of one target and what it rests on."""
    report: dict[str, Any] = {"name": target.key, "version": target.version, "modules": [], "detail": ""}
    if crashed:
        return {
            **report,
            "state": "crash",
            "detail": "probing it crashed or ended the process, or hung (a CPython or extension bug, or os._exit)",
        }
    if worker is None or "failed" in worker:
        return {**report, "state": "error", "detail": (worker or {}).get("failed", "no result from the probe")}
    tops: dict[str, list[str]] = worker["tops"]
    refused = [o[1] for o in tops.values() if o[0] == "refuses"]
    if refused:
        return {**report, "state": "refuses", "modules": refused}
    failed = {name: o for name, o in tops.items() if o[0] != "ok"}
    if failed:
        parent_fails = parent is not None and all(parent["tops"].get(n, ["ok"])[0] != "ok" for n in failed)
        detail = "; ".join(o[1] for o in failed.values())
        if parent_fails:
            detail += " (in the parent too)"
        state = "not found" if all(o[0] == "missing" for o in failed.values()) and parent_fails else "error"
        return {**report, "state": state, "modules": sorted(failed), "detail": detail}
    # The package imports.  What a normal import loads but the worker did not: a
    # compiled accelerator (its own, or a dependency's), or a whole optional
    # dependency that failed to import (requests without charset_normalizer):
    fallbacks: list[str] = []
    if parent:
        fallbacks = sorted(
            name
            for name in set(parent["loaded"]) - set(worker["loaded"])
            if name.partition(".")[0] in worker["packages"]
        )
        tops_done = {n.partition(".")[0] for n in fallbacks}
        fallbacks += sorted(set(parent["packages"]) - set(worker["packages"]) - tops_done)
    if fallbacks:
        return {
            **report,
            "state": "degraded",
            "modules": fallbacks,
            "detail": "imports, but without its compiled accelerator(s): it falls back to slower or reduced code",
        }
    ext_refused = sorted(name for name, o in worker["extensions"].items() if o[0] == "refuses")
    if ext_refused:
        return {
            **report,
            "state": "refuses",
            "modules": ext_refused,
            "detail": "the package imports, but these parts refuse isolated subinterpreters",
        }
    return {**report, "state": "works"}


def run_doctor(names: list[str], out: TextIO = sys.stdout, as_json: bool = False) -> int:
    targets, missing = targets_for(names)
    worker_results, crashed = _probe_all("workers", targets)
    parent_results = _probe_parents([t for t in targets if t.key not in crashed])
    reports = [diagnose(t, worker_results.get(t.key), parent_results.get(t.key), t.key in crashed) for t in targets]
    reports += [
        {"name": n, "version": "", "state": "not found", "modules": [], "detail": "no such distribution or module"}
        for n in missing
    ]
    if as_json:
        out.write(json.dumps({"python": sys.version.split()[0], "packages": reports}, indent=2) + "\n")
    else:
        _table(reports, out)
    return 1 if names and any(r["state"] not in ("works", "degraded") for r in reports) else 0


def _table(reports: list[dict[str, Any]], out: TextIO) -> None:
    out.write(f"Python {sys.version.split()[0]}: does each package work inside an interpexec worker?\n\n")
    if not reports:
        out.write("nothing to check\n")
        return
    width = max(len("package"), *(len(r["name"]) for r in reports))
    out.write(f"{'package':<{width}}  {'state':<9}  modules / detail\n{'-' * width}  {'-' * 9}  {'-' * 40}\n")
    for r in reports:
        what = ", ".join(r["modules"])
        if r["detail"] and r["state"] not in ("refuses", "degraded"):
            what = (what + ": " if what else "") + r["detail"]
        if len(what) > 110:
            what = what[:107] + "..."
        out.write(f"{r['name']:<{width}}  {r['state']:<9}  {what}\n")
    counts = {s: sum(1 for r in reports if r["state"] == s) for s in STATES}
    out.write("\n" + ", ".join(f"{n} {s}" for s, n in counts.items() if n) + "\n")
    if counts["refuses"] or counts["degraded"]:
        out.write(
            "refuses: code that needs those modules fails in workers (IncompatibleModuleError): run it on a\n"
            "ProcessPoolExecutor, or import it in the parent only. degraded: it works, without its accelerator.\n"
        )
