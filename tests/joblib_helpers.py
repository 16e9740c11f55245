"""Functions that tests/test_joblib.py runs in workers through joblib.

Workers import this module by reference, so it must not import joblib (which
cannot be imported in a subinterpreter): joblib appears only inside ``nested``.
"""

from __future__ import annotations

import os
import sys
import threading

from interpexec import _shared

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: How long a task waits for a token that a test means to send (a bound, so a
#: broken test fails instead of hanging).
WAIT = 60.0


def square(x: int) -> int:
    return x * x


def where() -> tuple[int, bool, int]:
    """(process id, whether this runs in an interpexec worker, OS thread id)."""
    return os.getpid(), _shared.in_worker(), threading.get_native_id()


def foreign_modules(_: object = None) -> list[str]:
    """The modules of joblib, loky (and faulthandler, which they need) loaded here."""
    return sorted(m for m in sys.modules if m.partition(".")[0] in {"joblib", "loky", "faulthandler"})


def fail_at(x: int, bad: int) -> int:
    if x == bad:
        raise ValueError(f"bad item {x}")
    return x


def block(events: Any, started: Any, hold: Any, name: str = "block") -> str:
    """Say it started (on ``events``, and on ``started`` unless None), then wait
    on ``hold``, where nothing is ever put: it ends only when interrupted (it
    then says so), or after WAIT seconds."""
    try:
        events.put(f"{name}:start")
        if started is not None:
            started.put(name)
        try:
            hold.get(timeout=WAIT)
        except Exception:  # queue.Empty: nobody interrupted it
            pass
        events.put(f"{name}:done")
        return name
    except BaseException:
        events.put(f"{name}:stopped")
        raise


def fail_once_started(events: Any, started: Any) -> None:
    """Fail as soon as ``block`` has started in another worker."""
    started.get(timeout=WAIT)
    events.put("fail")
    raise ValueError("early failure")


def record(events: Any, name: str) -> str:
    events.put(name)
    return name


def swap(mine: Any, theirs: Any) -> str:
    """Return once the matching ``swap(theirs, mine)`` runs too: two calls that
    end only if two workers are free at the same time."""
    mine.put("here")
    theirs.get(timeout=WAIT)
    return "swapped"


def wait_for(token_queue: Any) -> str:
    """Block until the test puts a token (for the unordered generator test)."""
    return str(token_queue.get(timeout=WAIT))


def nested(n: int) -> list[int]:
    """A task that calls joblib itself (nested parallelism)."""
    from joblib import Parallel, delayed  # type: ignore[import-not-found,import-untyped,unused-ignore]

    return list(Parallel(n_jobs=2)(delayed(square)(i) for i in range(n)))


def fill(view: Any, start: int, stop: int, value: int) -> int:
    """Write ``value`` into ``view[start:stop]`` (a buffer lent with share())."""
    view[start:stop] = bytes([value]) * (stop - start)
    return stop - start


def describe(arg: Any) -> tuple[str, int]:
    return type(arg).__name__, len(arg)
