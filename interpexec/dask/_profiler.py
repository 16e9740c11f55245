"""Keeping distributed's profiler away from ``sys._current_frames()`` while subinterpreters run.

``sys._current_frames()`` must not run while subinterpreter threads exist (on some
CPython builds, 3.13.0 among them, it corrupts the heap).  distributed calls it
from three places in a worker process:

* the "Profile" thread that every Server starts when
  ``distributed.worker.profile.enabled`` is true (it samples the event loop
  thread), before any plugin or preload runs.  It calls ``sys._current_frames()``
  while holding ``distributed.profile.lock``, so holding that lock keeps it out:
  :data:`profiler_pause` holds it while any interpexec pool of a plugin exists;
* ``Worker.trigger_profile`` (periodic callback "profile"), for tasks on threads,
* ``Worker.get_call_stack`` (``Client.call_stack()``): both switched off for the
  worker by :func:`quiet_worker_profiler`.

Main interpreter only.
"""

from __future__ import annotations

import threading
from typing import Any

import distributed  # type: ignore[import-not-found,import-untyped,unused-ignore]
import distributed.profile  # type: ignore[import-not-found,import-untyped,unused-ignore]

from ._common import UnsupportedDistributedError


class ProfilerPause:
    """Holds ``distributed.profile.lock`` while at least one holder has acquired it
    (the plugins installed in this process: one each)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders = 0
        self._holding_profile_lock = False

    def acquire(self) -> None:
        """Pause the profiler thread (or refuse, if it cannot be paused)."""
        with self._lock:
            if self._holders:
                self._holders += 1
                return
            lock = getattr(distributed.profile, "lock", None)
            watch = getattr(distributed.profile, "_watch", None)
            uses_lock = lock is not None and "lock" in getattr(getattr(watch, "__code__", None), "co_names", ())
            if uses_lock:
                assert lock is not None
                if not lock.acquire(timeout=30):
                    raise RuntimeError("interpexec.dask: timed out waiting for distributed's profiler to pause")
            elif any(t.name == "Profile" and t.is_alive() for t in threading.enumerate()):
                raise UnsupportedDistributedError(
                    f"distributed {getattr(distributed, '__version__', '?')}'s profiler thread samples "
                    "sys._current_frames(), which crashes CPython while subinterpreters run in this process. "
                    "Start the worker with the dask config distributed.worker.profile.enabled: False "
                    "(e.g. DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED=False)."
                )
            self._holders = 1
            self._holding_profile_lock = uses_lock

    def release(self) -> None:
        """Undo one :meth:`acquire`; the last one lets the profiler thread go on."""
        with self._lock:
            if not self._holders:
                return
            self._holders -= 1
            if self._holders == 0 and self._holding_profile_lock:
                self._holding_profile_lock = False
                distributed.profile.lock.release()


#: The one pause of this process (distributed's profiler lock is process-wide).
profiler_pause = ProfilerPause()


def quiet_worker_profiler(worker: Any) -> None:
    """Stop the worker's own sampling and call-stack handler (see above)."""
    for name in ("profile", "profile-cycle"):
        pc = worker.periodic_callbacks.pop(name, None)
        if pc is not None:
            pc.stop()

    def get_call_stack(keys: Any = None) -> dict[Any, Any]:
        return {}  # would need sys._current_frames()

    worker.get_call_stack = get_call_stack
    handlers = getattr(worker, "handlers", None)
    if isinstance(handlers, dict) and "call_stack" in handlers:
        handlers["call_stack"] = get_call_stack
