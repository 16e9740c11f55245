# What a worker interpreter sets up around the tasks it runs.
#
# * :class:`MainFixup`: functions and classes defined in the parent's ``__main__``
#   resolve (the parent's script is re-run once as ``__mp_main__``, as
#   multiprocessing's spawn does, by ``_worker_script``, loaded then).
# * :class:`LogForwarder`: ``logging`` records emitted by tasks reach the parent's
#   handlers; installed (from ``_worker_log``, loaded then) the moment task code
#   first imports ``logging``, so even the first task's records are forwarded.
# * :class:`ThreadTracker`: threads that tasks start are counted, so that the worker
#   can tell them its interpreter is ending (as a process exit does: threading's
#   atexit callbacks), wait for them (on a lock, not by polling) before that
#   interpreter is destroyed, and name the ones left behind.
#
# Imported inside every worker: standard library only, and little of it.

import os
import sys

from . import _compat

TYPE_CHECKING = False  # typing is not imported: this module loads in every worker
if TYPE_CHECKING:
    from typing import Any  # noqa: F401 (names used only in type comments)

    from ._transport import Channel  # noqa: F401


class MainFixup:
    # Lets functions and classes defined in the parent's ``__main__`` resolve.
    #
    # Mirrors multiprocessing's spawn: the parent's main script (or ``-m`` module) is
    # run once, lazily, under the name ``__mp_main__`` (so its
    # ``if __name__ == "__main__":`` block does not run) and installed as
    # ``sys.modules["__main__"]``.

    __slots__ = ("done", "main_name", "main_path")

    def __init__(self, main_path, main_name):  # type: (str | None, str | None) -> None
        self.main_path = main_path
        self.main_name = main_name
        self.done = False

    def applies_to(self, exc):  # type: (BaseException) -> bool
        return not self.done and isinstance(exc, (AttributeError, ImportError)) and "__main__" in str(exc)

    def apply(self):  # type: () -> None
        from ._worker_script import run_script

        run_script(self.main_path, self.main_name)
        # Only now: a task stopped while the script was running gets it re-run.
        self.done = True


class LogForwarder:
    # Sends ``logging`` records emitted inside this worker to the caller, whose
    # own handlers then handle them.  A worker that never logs never imports
    # ``logging``: :meth:`arm` installs the handler when ``logging`` is first
    # imported (or at once, if it already is).

    __slots__ = ("index", "installed", "level", "results")

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
        from ._worker_log import install_handler

        install_handler(self.results, self.index, self.level)


class _ImportHook:
    # A meta path finder that calls ``then()`` right after module ``name`` has
    # been executed, then steps aside.

    __slots__ = ("name", "then")

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
        from ._worker_log import find_spec_then

        return find_spec_then(fullname, self.then)


class ThreadTracker:
    # Counts the threads started in this interpreter (by tasks: the watchdog
    # starts before tracking does) and lets the worker wait until they have ended.
    #
    # ``idle`` is held while any tracked thread runs; waiting is an acquire with a
    # timeout on it, so nothing polls.

    __slots__ = ("count", "idle", "lock", "next_token", "running")

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
        # Wait (at most ``timeout`` seconds; None: for ever) until every tracked
        # thread has ended; True if none is left.
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

    def end_threading(self):  # type: () -> None
        # The interpreter is about to end: tell the threads tasks left, as a
        # worker process's exit does (see _compat.end_threading), by running
        # threading's atexit callbacks.  In a tracked thread of their own:
        # they may join busy threads, or block themselves, and the wait that
        # follows is bounded, and names what is left.
        calls = _compat.end_threading()
        if not calls:
            return

        def threading_atexit_callbacks():  # type: () -> None
            for call in calls:
                try:
                    call()
                except BaseException as exc:  # (reported as CPython's finalization does)
                    try:
                        print("Exception ignored on threading shutdown:", file=sys.stderr)
                        sys.excepthook(type(exc), exc, exc.__traceback__)
                    except BaseException:  # (a broken stderr or hook: reporting never ends the worker)
                        pass

        threading_atexit_callbacks.__qualname__ = "threading atexit callbacks"  # (named in the warning)
        try:
            _compat.start_thread(threading_atexit_callbacks)  # (tracked: installed by then)
        except Exception:  # (no thread to be had: here then, as an exit would)
            threading_atexit_callbacks()

    def _settled(self):  # type: () -> bool
        # A thread that left its function still has to delete its thread state;
        # CPython refuses to end an interpreter until it has.  A few yields cover
        # that last step.
        for _ in range(100_000):
            if _compat.thread_count() == 0:
                return True
            os.sched_yield()
        return _compat.thread_count() == 0

    def names(self):  # type: () -> list[str]
        with self.lock:
            return sorted(self.running.values())
