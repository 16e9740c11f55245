"""What a worker interpreter sets up around the tasks it runs.

* :class:`MainFixup`: functions and classes defined in the parent's ``__main__``
  resolve (the parent's script is re-run once as ``__mp_main__``, as
  multiprocessing's spawn does).
* :class:`LogForwarder`: ``logging`` records emitted by tasks reach the parent's
  handlers; installed the moment task code first imports ``logging``, so even the
  first task's records are forwarded.
* :class:`ThreadTracker`: threads that tasks start are counted, so that the worker
  can wait for them (on a lock, not by polling) before its interpreter is
  destroyed, and name the ones left behind.

Imported inside every worker: standard library only, and little of it.
"""

import os
import sys

from . import _compat
from ._protocol import EV_LOG, EVENT

TYPE_CHECKING = False  # typing is not imported: this module loads in every worker
if TYPE_CHECKING:
    from typing import Any  # noqa: F401 (names used only in type comments)

    from ._transport import Channel  # noqa: F401


#: The note on an exception raised by the caller's script run as ``__mp_main__``.
SCRIPT_RAISED = (
    "interpexec: this was raised by the top level of your script, which workers run (as __mp_main__, without "
    'its `if __name__ == "__main__":` block) to find the functions and classes it defines, as '
    "ProcessPoolExecutor's spawn workers do. Move what workers cannot run (such as an import of a module that "
    "cannot load in a subinterpreter) under that block or into the functions that need it, or define the task's "
    "functions in a module of their own."
)


class MainFixup:
    """Lets functions and classes defined in the parent's ``__main__`` resolve.

    Mirrors multiprocessing's spawn: the parent's main script (or ``-m`` module) is
    run once, lazily, under the name ``__mp_main__`` (so its
    ``if __name__ == "__main__":`` block does not run) and installed as
    ``sys.modules["__main__"]``.
    """

    def __init__(self, main_path, main_name):  # type: (str | None, str | None) -> None
        self.main_path = main_path
        self.main_name = main_name
        self.done = False

    def applies_to(self, exc):  # type: (BaseException) -> bool
        return not self.done and isinstance(exc, (AttributeError, ImportError)) and "__main__" in str(exc)

    def apply(self):  # type: () -> None
        import runpy
        import types

        name, path = self.main_name, self.main_path
        try:
            if name and name != "__main__" and not name.endswith(".__main__"):
                namespace = runpy.run_module(name, run_name="__mp_main__", alter_sys=True)
            elif path and os.path.exists(path):
                namespace = runpy.run_path(path, run_name="__mp_main__")
            else:
                self.done = True
                return
        except Exception as exc:  # the script's own failure: say where it comes from
            try:
                if SCRIPT_RAISED not in (getattr(exc, "__notes__", None) or ()):  # (an exception kept: once)
                    exc.add_note(SCRIPT_RAISED)
            except Exception:  # (a __notes__ that is not a list: the exception as it is)
                pass
            raise
        module = types.ModuleType("__mp_main__")
        module.__dict__.update(namespace)
        sys.modules["__main__"] = sys.modules["__mp_main__"] = module
        # Only now: a task stopped while the script was running gets it re-run.
        self.done = True


class LogForwarder:
    """Sends ``logging`` records emitted inside this worker to the caller, whose
    own handlers then handle them.  A worker that never logs never imports
    ``logging``: :meth:`arm` installs the handler when ``logging`` is first
    imported (or at once, if it already is)."""

    def __init__(self, results, index, level):  # type: (Channel, int, int) -> None
        self.results = results
        self.index = index
        self.level = level
        self.installed = False

    def arm(self):  # type: () -> None
        if "logging" in sys.modules:
            self.install()
        else:
            sys.meta_path.insert(0, _ImportHook("logging", self.install))

    def install(self):  # type: () -> None
        if self.installed:
            return
        self.installed = True
        import logging

        results, index = self.results, self.index
        interp = _compat.current_interpreter_id()

        class ForwardHandler(logging.Handler):
            def emit(self, record):  # type: (logging.LogRecord) -> None
                try:
                    exc_text = record.exc_text
                    if record.exc_info and not exc_text:
                        exc_text = logging.Formatter().formatException(record.exc_info)
                    fields = (
                        str(record.name),
                        int(record.levelno),
                        str(record.pathname),
                        int(record.lineno or 0),
                        record.getMessage(),
                        exc_text,
                        str(record.funcName),
                        float(record.created),
                        str(record.threadName),
                        interp,
                    )
                    results.put((-1, EVENT, index, EV_LOG, fields))
                except Exception:  # logging's own contract: a handler reports, never raises
                    self.handleError(record)

        root = logging.getLogger()
        root.addHandler(ForwardHandler())
        root.setLevel(self.level)


class _ImportHook:
    """A meta path finder that calls ``then()`` right after module ``name`` has
    been executed, then steps aside."""

    def __init__(self, name, then):  # type: (str, Any) -> None
        self.name = name
        self.then = then

    def find_spec(self, fullname, path=None, target=None):  # type: (str, Any, Any) -> Any
        if fullname != self.name:
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        from importlib.util import find_spec

        spec = find_spec(fullname)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _ThenLoader(spec.loader, self.then)  # type: ignore[assignment]
        return spec


class _ThenLoader:
    def __init__(self, loader, then):  # type: (Any, Any) -> None
        self.loader = loader
        self.then = then

    def create_module(self, spec):  # type: (Any) -> Any
        return self.loader.create_module(spec)

    def exec_module(self, module):  # type: (Any) -> None
        self.loader.exec_module(module)
        self.then()

    def __getattr__(self, name):  # type: (str) -> Any
        return getattr(self.loader, name)


class ThreadTracker:
    """Counts the threads started in this interpreter (by tasks: the watchdog
    starts before tracking does) and lets the worker wait until they have ended.

    ``idle`` is held while any tracked thread runs; waiting is an acquire with a
    timeout on it, so nothing polls."""

    def __init__(self):  # type: () -> None
        self.lock = _compat.allocate_lock()
        self.idle = _compat.allocate_lock()
        self.running: dict[int, str] = {}  # token -> thread name (best effort)
        self.count = 0
        self.next_token = 0

    def install(self):  # type: () -> None
        _compat.wrap_thread_starts(self.wrap)

    def wrap(self, function):  # type: (Any) -> Any
        with self.lock:
            self.next_token += 1
            token = self.next_token
            self.count += 1
            if self.count == 1:
                self.idle.acquire()
            owner = getattr(function, "__self__", None)
            self.running[token] = str(getattr(owner, "name", None) or getattr(function, "__qualname__", "thread"))

        def tracked(*args, **kwargs):  # type: (*Any, **Any) -> Any
            try:
                return function(*args, **kwargs)
            finally:
                with self.lock:
                    self.running.pop(token, None)
                    self.count -= 1
                    if self.count == 0:
                        self.idle.release()

        return tracked

    def wait(self, timeout):  # type: (float | None) -> bool
        """Wait (at most ``timeout`` seconds; None: for ever) until every tracked
        thread has ended; True if none is left."""
        with self.lock:
            if self.count == 0:
                return self._settled()
        if timeout is None:
            acquired = self.idle.acquire()
        else:
            acquired = self.idle.acquire(True, max(0.0, timeout))
        if not acquired:
            return False
        self.idle.release()
        return self._settled()

    def _settled(self):  # type: () -> bool
        """A thread that left its function still has to delete its thread state;
        CPython refuses to end an interpreter until it has.  A few yields cover
        that last step."""
        for _ in range(100_000):
            if _compat.thread_count() == 0:
                return True
            os.sched_yield()
        return _compat.thread_count() == 0

    def names(self):  # type: () -> list[str]
        with self.lock:
            return sorted(self.running.values())
