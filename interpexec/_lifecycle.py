"""Worker lifecycle: starting workers, retiring them, their exit, a broken pool.

A worker is *retired* when the pool stops counting on it: its task passed its
deadline, an interrupted task did not return to Python in time, or it waits for
threads a task left running.  A replacement starts at once; the retired thread
ends whenever its interpreter can be destroyed, and nothing waits for it except
process exit (CPython cannot finalize while an interpreter runs code).
"""

from __future__ import annotations

import threading
import warnings

from ._compat import ctypes_token, os_thread_started
from ._dispatch import Dispatcher
from ._future import start_running_locked
from ._protocol import WorkerSettings
from ._sigint import defer_sigint
from ._state import WorkItem
from ._worker import Worker

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from typing import Any


class Workers(Dispatcher):
    def start_locked(self) -> None:
        self.started = True
        self.start_error = None  # (only this start's failure counts: see after_start)
        while self.active < self.wanted and self.free_slots and self.broken is None:
            slot = self.free_slots.pop()
            try:
                name = f"{self.thread_name_prefix}_{slot}"
                w = Worker(self, slot, name, self.sys_path, self.control_view, self.layout)
                self.wake_written[slot] = self.ctl[self.layout.wake_read + slot]
            except Exception as exc:  # out of descriptors: as below
                self.free_slots.append(slot)
                self.start_error = exc
                return
            self.workers[slot] = w
            self.active += 1
            try:
                w.start()
            except BaseException as exc:  # no thread (the thread limit; the interpreter exiting)
                if os_thread_started(w.thread):
                    # (An exception from a signal handler, raised while start()
                    # waited for the thread to run: it runs, and is counted.)
                    raise
                del self.workers[slot]
                self.free_slots.append(slot)
                self.active -= 1
                w.discard()
                if not isinstance(exc, Exception):
                    raise
                # With other workers the pool goes on with fewer (the next start
                # tries again); with none it cannot run anything: the caller
                # breaks it once the lock is released (see after_start).
                self.start_error = exc
                return

    def after_start(self) -> None:
        """After a start of workers, with the lock released: a pool none of whose
        workers could start breaks (its futures fail with BrokenInterpreterPool,
        as ProcessPoolExecutor's do when its processes cannot start), rather than
        keep work that nothing will ever run (``shutdown()`` would wait for ever)."""
        error, self.start_error = self.start_error, None
        if error is not None and self.active == 0 and self.broken is None:
            self.set_broken(f"A worker thread could not be started, the pool is not usable anymore: {error}", error)

    def settings_for(self, worker: Worker) -> WorkerSettings:
        return WorkerSettings(
            slots=self.layout.slots,
            index=worker.slot,
            tasks=self.tasks.spec(),
            results=self.results.spec(),
            commands=worker.commands.spec(),
            interrupt_pipe=worker.interrupt_pipe,
            max_tasks=self.max_tasks_per_child or 0,
            idle_timeout=self.idle_timeout,
            grace=self.interrupt_grace,
            init_blob=self.init_blob,
            init_timeout=self.task_timeout,
            main_path=self.main_path,
            main_name=self.main_name,
            log_level=self.log_level,
            thread_grace=self.interrupt_grace,
            wake_fd=worker.wake_pipe[0],
            ctypes_token=ctypes_token(),
        )

    def prestart(self, wait: bool) -> None:
        with defer_sigint(), self.lock:  # (see start_locked)
            self.check_usable_locked()
            self.wanted = self.max_workers
            self.start_locked()
        self.after_start()
        # (Not on the resolver thread, in a done-callback: the workers' "started"
        # reports come through the results it delivers.)
        if wait and threading.get_ident() == self.resolver_ident:
            return
        with self.lock:
            if wait:
                while self.broken is None and not self._all_ready_locked():
                    self.ready.wait()
                if self.broken is not None:
                    raise self.broken_error()

    def _all_ready_locked(self) -> bool:
        return all(slot in self.ready_slots for slot, w in self.workers.items() if not w.retired)

    # --------------------------------------------------------- worker events
    def worker_should_restart(self, worker: Worker) -> bool:
        with self.lock:
            return self.broken is None and not worker.retired

    def worker_exited(self, worker: Worker, how: str, error: str | None) -> None:
        if error is not None and not worker.retired:
            self.set_broken(
                f"A worker interpreter stopped unexpectedly, the pool is not usable anymore:\n{error}", None
            )
        with self.lock:
            del self.workers[worker.slot]
            worker.commands.close()
            worker.close_wake_pipe()
            self.free_slots.append(worker.slot)
            self.ready_slots.discard(worker.slot)
            if not worker.retired:
                self.active -= 1
                if how == "idle" and self.wanted > self.base_workers and not (self.inflight or self.pending):
                    self.wanted -= 1  # (grown for work that has gone: on demand again)
            if how == "stop":
                # (a worker retired just after its last check may still take a STOP
                # meant for another: dispatch below sends a new one if so)
                self.stops_sent -= 1
            if (
                (how in ("idle", "retired") or worker.retired)
                and (self.work_left_locked() if self.shutdown_flag else (self.inflight or self.pending))
                and self.broken is None
                and self.active < self.wanted
            ):
                # Work arrived as it left; or a retired worker's slot is free at
                # last (every slot held by retired workers, none could start); or
                # a worker whose watchdog retired it (a deadline) ended before
                # the resolver handled that news (retire() then finds it gone).
                self.start_locked()
            failed = self.dispatch_locked() if self.shutdown_flag and self.started else []
            self.ready.notify_all()
        self.fail_items(failed)
        self.after_start()
        self.after_worker_exit()

    def take_results(self, final: bool = False) -> bool:
        raise NotImplementedError  # provided by Resolver

    def after_worker_exit(self) -> None:
        """Hook for the resolver: a worker is gone, or the pool broke."""

    def retire(self, slot: int, why: str | None = None, interp: int | None = None) -> None:
        """Stop counting on the worker in ``slot`` (stuck, timed out, or waiting
        for threads its tasks left) and start another in its place; with
        ``interp``, only if that worker still runs that interpreter."""
        failed: list[tuple[WorkItem, BaseException]] | None = None
        held_up = False
        with self.lock:
            worker = self.workers.get(slot)
            # (News from an interpreter that ended before it arrived: the worker
            # is gone and worker_exited started its replacement, perhaps in this
            # very slot; or it went on in a fresh interpreter (recycled).)
            if worker is not None and not worker.retired and (interp is None or worker.interp_id == interp):
                worker.retired = True
                self.active -= 1
                self.ready_slots.discard(slot)
                failed = []
                # (Shut down: only for work still to run.  A call that
                # interrupt_running stopped before any worker took it is
                # done, and a replacement would run the initializer a stuck
                # one could not get out of, which shutdown then waited for.)
                if self.broken is None and (not self.shutdown_flag or self.work_left_locked()):
                    self.start_locked()
                    failed = self.dispatch_locked()
                    # No worker left, and no slot to start one in (every one held
                    # by a retired worker whose interpreter cannot end yet).
                    held_up = not self.active and not self.free_slots and bool(self.pending or self.inflight)
                self.ready.notify_all()
        if failed is not None:
            self.fail_items(failed)
            self.after_start()
        if why and held_up:
            why += (
                "; every worker slot of the pool is now held by a retired worker, so the queued calls wait until "
                "the threads of one of them end"
            )
        if why and (interp is None or interp not in self.warned_interps):
            # (Last: with warnings as errors it raises, and the resolver handles
            # the message again.  Said even if the worker is gone, but once.)
            if interp is not None:
                self.warned_interps.add(interp)
            warnings.warn(why, RuntimeWarning, stacklevel=1)

    def set_broken(self, message: str, cause: BaseException | None) -> None:
        with self.lock:
            if self.broken is not None:
                return
            self.broken = message
            self.broken_cause = cause
            self.repair_limbo_locked()  # (first: its items go where they are failed below)
            waiting = list(self.pending)
            # Calls no worker has taken yet do not run: their futures fail here
            # (as ProcessPoolExecutor's workers end with a broken pool).
            self.take_back_queued_locked()
            doomed = list(self.inflight.values())
            self.pending.clear()
            self.inflight.clear()
            self.shutdown_flag = True
            failed = self.dispatch_locked()  # sends STOP to the workers still alive
            self.ready.notify_all()
            # Never dispatched: still PENDING, unless cancelled.  (Under the
            # pool's lock, so as not to wait for a future's lock another thread
            # may hold for good: see start_running_locked.)
            doomed += [item for item in waiting if start_running_locked(item.future)]
        self.fail_items(failed)
        error = self.broken_error()
        self.fail_items([(item, error) for item in doomed])
        self.after_worker_exit()  # the resolver notices and ends

    # ------------------------------------------------------------ os.fork()
    # CPython's child aborts in PyOS_AfterFork_Child when any subinterpreter
    # exists at fork time (3.13-3.15, even an idle one).  Around a fork, every
    # worker finishes its current task, destroys its interpreter, and builds a
    # fresh one once the fork is done (so initializers run again).
    def entering(self, worker: Worker) -> None:
        with self.lock:
            while self.parking:
                self.ready.wait()
            worker.in_interp = True

    def left(self, worker: Worker) -> None:
        with self.lock:
            worker.in_interp = False
            self.ready.notify_all()


def warn_threads_left(slot: int, names: Any) -> str:
    names = ", ".join(str(n) for n in names) or "unnamed"
    return (
        f"a task left thread(s) running in interpexec worker {slot} ({names}); the worker is replaced, and its "
        "interpreter is destroyed once they end (process exit waits for them, as it would for a worker process)"
    )
