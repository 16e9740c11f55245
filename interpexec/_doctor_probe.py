"""The child process behind ``python -m interpexec doctor``.

``python -m interpexec._doctor_probe workers|parent`` reads targets (JSON, one
per line) on stdin and writes one JSON line per target on stdout:

* ``workers``: each target is probed in a fresh worker interpreter: its
  top-level modules are imported, then each of its compiled extension modules;
  the outcome of each import, and which extension modules were loaded.
* ``parent``: the top-level modules are imported in this (main) interpreter, to
  learn which extension modules and packages a normal import loads (an
  accelerator or a dependency that loads here but not in a worker means the
  package runs degraded there).  One target per process, so each is measured
  from the same start.

A crash kills only this child; the parent (``_doctor``) notices and goes on.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
from typing import Any


def _outcome(name: str) -> list[str]:
    """["ok"] | ["refuses", dotted module] | ["missing", text] | ["error", text]"""
    try:
        importlib.import_module(name)
    except BaseException as exc:  # a probe reports every failure, SystemExit included
        from ._errors import as_incompatible_module_error

        refusal = as_incompatible_module_error(exc)
        if refusal is not None:
            return ["refuses", refusal.module]
        text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0][:300]
        return ["missing" if isinstance(exc, ModuleNotFoundError) else "error", text]
    return ["ok"]


def _loaded_extensions() -> list[str]:
    """Every compiled extension module now imported (by file, not built in)."""
    import importlib.machinery

    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    out = []
    for name, module in list(sys.modules.items()):
        origin = getattr(getattr(module, "__spec__", None), "origin", None)
        # (aliases, such as requests.packages.*, are not counted twice)
        if isinstance(origin, str) and origin.endswith(suffixes) and getattr(module, "__name__", None) == name:
            out.append(name)
    return sorted(out)


def probe(tops: list[str], extensions: list[str]) -> dict[str, Any]:
    """Import ``tops`` and note every extension module and package that loaded,
    then import each of ``extensions`` not loaded yet.  Runs in a fresh worker."""
    top_outcomes = {name: _outcome(name) for name in tops}
    loaded = _loaded_extensions()
    packages = sorted({name.partition(".")[0] for name in sys.modules})
    ext_outcomes = {name: _outcome(name) for name in extensions if name not in sys.modules}
    return {"tops": top_outcomes, "loaded": loaded, "packages": packages, "extensions": ext_outcomes}


def probe_tops(tops: list[str], extensions: list[str]) -> dict[str, Any]:
    """The baseline, in a fresh process's main interpreter: import the top-level
    modules; the extension modules and packages that this import loaded."""
    before_ext = set(_loaded_extensions())
    before = {name.partition(".")[0] for name in sys.modules}
    top_outcomes = {name: _outcome(name) for name in tops}
    # Packages that are real modules (Cython's cython_runtime and _cython_3_x
    # have no spec) and public ones: what a dependency looks like.
    after = {
        name.partition(".")[0]
        for name, module in list(sys.modules.items())
        if not name.startswith("_") and getattr(module, "__spec__", None) is not None
    }
    return {
        "tops": top_outcomes,
        "loaded": sorted(set(_loaded_extensions()) - before_ext),
        "packages": sorted(after - before),
    }


def _emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def _report(target: dict[str, Any], fut: Any) -> None:
    try:
        _emit({"key": target["key"], **fut.result()})
    except BaseException as exc:  # the probe itself failed (a timeout): report it as an error
        _emit({"key": target["key"], "failed": f"{type(exc).__name__}: {exc}"[:300]})


def main(mode: str, timeout: float) -> int:
    targets = [json.loads(line) for line in sys.stdin if line.strip()]
    if mode == "parent":
        for t in targets:
            _emit({"key": t["key"], "started": True})
            _emit({"key": t["key"], **probe_tops(t["tops"], t["extensions"])})
        _done()
    from ._executor import InterpreterPoolExecutor

    workers = max(1, min(2, len(targets)))
    if mode == "serial":
        workers = 1
    # max_tasks_per_child=1: every target in a fresh interpreter, so one package's
    # state cannot make another pass or fail.
    with InterpreterPoolExecutor(workers, max_tasks_per_child=1, forward_logs=False) as pool:
        futures = []
        for t in targets:
            _emit({"key": t["key"], "started": True})
            futures.append((t, pool.schedule(probe, (t["tops"], t["extensions"]), timeout=timeout)))
            if mode == "serial":  # one at a time, reported at once: a crash names its target
                _report(*futures.pop())
        for t, fut in futures:
            _report(t, fut)
        # Everything is reported: leave now, without waiting for a worker stuck in
        # an import that blocks in C (exit would wait for it).
        _done()
    return 0


def _done() -> None:
    _emit({"done": True})
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "workers", float(sys.argv[2]) if len(sys.argv) > 2 else 60.0))
