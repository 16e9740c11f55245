"""``python -m interpexec doctor``: which modules import inside a worker."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from typing import NamedTuple, TextIO

__all__ = ["Check", "check_modules", "default_modules", "try_import"]


class Check(NamedTuple):
    module: str
    status: str  # "ok", "incompatible", "not found", "error"
    detail: str


def try_import(name: str) -> str:
    """Run inside a worker: import ``name`` there."""
    importlib.import_module(name)
    return name


def default_modules() -> list[str]:
    """Every importable top-level module of the installed distributions."""
    names = set()
    for top in importlib.metadata.packages_distributions():
        if top.isidentifier() and not top.startswith("_"):
            names.add(top)
    return sorted(names, key=str.lower)


def check_modules(names: list[str], timeout: float = 120.0) -> list[Check]:
    """Import each module in a fresh worker interpreter and report the outcome."""
    from ._errors import IncompatibleModuleError
    from ._executor import InterpreterPoolExecutor

    checks: list[Check] = []
    # max_tasks_per_child=1: every module is tried in a fresh interpreter, so one
    # module's state cannot make another pass or fail.
    with InterpreterPoolExecutor(2, max_tasks_per_child=1) as pool:
        futures = [(name, pool.schedule(try_import, (name,), timeout=timeout)) for name in names]
        for name, fut in futures:
            try:
                fut.result()
            except IncompatibleModuleError as exc:
                checks.append(Check(name, "incompatible", exc.detail or str(exc)))
            except ModuleNotFoundError as exc:
                checks.append(Check(name, "not found", str(exc)))
            except BaseException as exc:
                checks.append(Check(name, "error", f"{type(exc).__name__}: {exc}"))
            else:
                checks.append(Check(name, "ok", ""))
    return checks


def run_doctor(names: list[str], out: TextIO = sys.stdout) -> int:
    modules = names or default_modules()
    if not modules:
        out.write("no modules to check\n")
        return 0
    checks = check_modules(modules)
    width = max(len("module"), *(len(c.module) for c in checks))
    out.write(f"Python {sys.version.split()[0]}: can each module be imported inside an interpexec worker?\n\n")
    out.write(f"{'module':<{width}}  {'status':<13} detail\n{'-' * width}  {'-' * 13} {'-' * 40}\n")
    for c in checks:
        detail = next((line.strip() for line in c.detail.splitlines() if line.strip()), "")
        if len(detail) > 100:
            detail = detail[:97] + "..."
        out.write(f"{c.module:<{width}}  {c.status:<13} {detail}\n")
    bad = [c for c in checks if c.status == "incompatible"]
    ok = sum(1 for c in checks if c.status == "ok")
    out.write(f"\n{ok} of {len(checks)} import in a worker")
    if bad:
        out.write(
            f"; {len(bad)} refuse isolated subinterpreters: run work that needs them on a ProcessPoolExecutor,"
            " or import them in the parent only and pass plain data to the workers"
        )
    out.write("\n")
    # Exit status: 0 when every module named explicitly imports; listing is informational.
    return 1 if names and any(c.status != "ok" for c in checks) else 0
