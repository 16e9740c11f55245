"""The result dicts a Dask worker expects from its task runner, built from the pool's outcome.

:func:`success_msg` and :func:`failure_msg` build exactly what distributed's own
runner returns for a task (result, ``dask.sizeof`` size, type, start and stop
times; or ``distributed.core.error_message``'s fields and the exception).  A task
that failed in a subinterpreter comes back with interpexec's
:class:`~interpexec.RemoteTraceback` text as its cause: the task's own frames are
rebuilt from it into a real traceback (with tblib, as Dask does), so the client
sees the exception as if the task had run in a thread.  Main interpreter only.
"""

from __future__ import annotations

import os
import re
import threading
from typing import Any

from dask.sizeof import sizeof  # type: ignore[import-not-found,import-untyped,unused-ignore]
from distributed.core import error_message  # type: ignore[import-not-found,import-untyped,unused-ignore]
from tblib import Traceback  # type: ignore[import-not-found,import-untyped,unused-ignore]

from .. import RemoteTraceback

try:
    from distributed.exceptions import Reschedule  # type: ignore[import-not-found,import-untyped,unused-ignore]
except ImportError:  # older distributed defines it in distributed.worker
    from distributed.worker import Reschedule  # type: ignore[attr-defined,no-redef,unused-ignore]

#: interpexec's own directory: its frames lead a task's remote traceback.
_INTERPEXEC_DIR = os.path.dirname(os.path.dirname(__file__)) + os.sep
_FRAME_RE = re.compile(r'^  File "(?P<file>.+)", line (?P<line>\d+), in (?P<name>.+)$')


def _remote_frames(exc: BaseException) -> list[tuple[str, int, str]] | None:
    """The frames of the task's final traceback, from interpexec's RemoteTraceback
    text, without interpexec's own leading frames."""
    remote = exc.__cause__
    if not isinstance(remote, RemoteTraceback):
        return None
    text = remote.tb
    start = text.rfind("Traceback (most recent call last):")
    if start < 0:
        return None
    frames: list[tuple[str, int, str]] = []
    for line in text[start:].splitlines()[1:]:
        m = _FRAME_RE.match(line)
        if m:
            frames.append((m["file"], int(m["line"]), m["name"]))
        elif not line.startswith("  "):
            break
    while frames and frames[0][0].startswith(_INTERPEXEC_DIR):
        frames.pop(0)
    return frames or None


def _rebuild_traceback(frames: list[tuple[str, int, str]]) -> Any:
    """A real traceback object with the task's frames (as tblib does for Dask)."""
    node: dict[str, Any] | None = None
    for filename, lineno, name in reversed(frames):
        node = {
            "tb_frame": {
                "f_code": {"co_filename": filename, "co_name": name},
                "f_globals": {"__file__": filename, "__name__": "?"},
                "f_lineno": lineno,
            },
            "tb_lineno": lineno,
            "tb_next": node,
        }
    try:
        return Traceback.from_dict(node).as_traceback()
    except Exception:
        # tblib compiles stand-in code objects for frames parsed from text; should
        # it refuse one, the failure is still reported, with interpexec's
        # RemoteTraceback text as the cause instead of a rebuilt traceback.
        return None


def failure_msg(exc: BaseException, start: float, stop: float, delay: float, exception_key: str) -> dict[str, Any]:
    """The worker's runner's failure dict for ``exc`` (raised in a subinterpreter or
    while preparing the task); ``exception_key`` is :attr:`Runner.exception_key`."""
    remote = isinstance(exc.__cause__, RemoteTraceback)
    frames = _remote_frames(exc) if remote else None
    tb = _rebuild_traceback(frames) if frames else None
    if tb is not None:
        # The task's own frames stand in for interpexec's RemoteTraceback text, so
        # the client sees the exception as if the task had run in a thread: with
        # its cause, or the exception it was handling as its context.
        cause = exc.__cause__
        exc.__cause__ = cause.__cause__  # type: ignore[union-attr]
        if exc.__cause__ is None and cause.__context__ is not None:  # type: ignore[union-attr]
            exc.__context__ = cause.__context__  # type: ignore[union-attr]
            exc.__suppress_context__ = False
    elif not remote:
        tb = exc.__traceback__  # raised here, in the main interpreter
    try:
        raise exc
    except BaseException as e:  # not a handler: error_message() reads the exception from sys.exc_info()
        e.__traceback__ = tb  # not this frame; None keeps the RemoteTraceback text as the cause
        msg: dict[str, Any] = dict(error_message(e))
    msg["op"] = "task-erred"
    msg[exception_key] = exc
    msg["start"] = start + delay
    msg["stop"] = stop + delay
    msg["thread"] = threading.get_ident()
    return msg


def success_msg(result: Any, start: float, stop: float, delay: float) -> dict[str, Any]:
    """The worker's runner's dict for a task that returned ``result``."""
    return {
        "op": "task-finished",
        "status": "OK",
        "result": result,
        "nbytes": sizeof(result),
        "type": type(result) if result is not None else None,
        "start": start + delay,
        "stop": stop + delay,
        "thread": threading.get_ident(),
    }


def reschedule(cause: BaseException) -> BaseException:
    """distributed's ``Reschedule``, caused by ``cause``: the scheduler runs the task elsewhere."""
    exc: BaseException = Reschedule()
    exc.__cause__ = cause
    return exc
