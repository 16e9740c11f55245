"""Stopping: shutdown, terminate, process exit, Ctrl-C and os.fork().

* ``shutdown`` sends one STOP per worker after the pending work; with
  ``cancel_futures`` pending work is cancelled first, with ``interrupt_running``
  running tasks (and initializers) are interrupted.
* ``terminate`` does all of that and takes back queued work no worker took yet.
* At exit, every pool is shut down as the standard executors are (queued work
  runs, exit waits); after an unhandled Ctrl-C (KeyboardInterrupt), pending work
  is cancelled and running tasks are interrupted, so the program ends promptly.
  A C-level guard run just before the exit hook records Ctrl-Cs from the exit's
  first instant, so that none can cut the hook short (CPython aborts if it
  finalizes while a worker still runs inside its interpreter).
* Around ``os.fork()`` every worker leaves its interpreter (CPython's child
  aborts if any subinterpreter exists at fork time); the child marks inherited
  pools broken.
"""

from __future__ import annotations

import atexit
import collections
import functools
import os
import sys
import threading
import time

from . import _compat, _queue, _sigint, _wakeup
from ._future import RESOLVERS
from ._resolver import close_spares_if_last
from ._state import LIVE_POOLS, Events
from ._transport import PARK
from ._waiting import Waiting

TYPE_CHECKING = False  # typing is not imported at run time (start-up cost)
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


class Stopper(Waiting):
    def shutdown(self, wait: bool, cancel_futures: bool, interrupt_running: bool = False) -> None:
        # A future lock this thread still holds can only be one a Ctrl-C left
        # (inside concurrent.futures.wait()): dispatch, holding the pool's lock,
        # would wait for it for ever, and so would this thread for the pool's.
        self.release_future_locks()
        with self.lock:
            self.shutdown_flag = True
            if cancel_futures:
                self.repair_limbo_locked()  # (first: its items go where they are cancelled below)
                # (A call a dispatch this shutdown interrupted, in a signal
                # handler, is moving: it counts as handed to the workers.)
                self.take_pending_to_cancel_locked()
            failed = self.dispatch_locked() if self.started and not self.forked else []
            started = self.started and not self.forked
        self.fail_items(failed)
        # (Also those an earlier shutdown, cut short, left.)  Inside a pool call
        # that holds the pool's lock (a signal handler's shutdown), a call whose
        # future's lock another thread holds is left to the resolver: see there.
        if self.cancelling or self.taken_back or self.drained:
            try:
                self.finish_cancelling()
            except BaseException:
                self.wake_resolver()  # (it finishes them)
                raise
        if interrupt_running:
            self.interrupt_running()
        if not started:
            if not self.forked:
                resolver = self.resolver_thread
                if resolver is not None:
                    # (Its start ran, but the first submit's start of the
                    # workers was cut short by a signal handler's exception:
                    # with no worker it ends once woken, and closes the
                    # channels itself.)
                    self.wake_resolver()
                    if wait and resolver.is_alive() and resolver is not threading.current_thread():
                        resolver.join()
                self.maybe_close()
            return
        self.wake_resolver()
        if wait:
            self.join()
            # (Interpreters kept for items that a task in a worker took since.)
            _queue.release_kept()

    def join(self, include_retired: bool = False) -> None:
        """Wait until every worker has ended.  Retired workers (a call stuck in C,
        or threads a task left) get ``interrupt_grace`` seconds more, which is
        plenty for one that merely timed out in Python code; after that they
        are not waited for unless ``include_retired``.  Waits on the pool's
        condition, which retirement and exits notify.

        A signal handler that calls this inside the main thread's own take of
        results (holding the collect lock) does not wait: each worker takes
        its last results under that lock before it ends, and letting go of it
        there would let a worker destroy its interpreter under the take's
        views of its buffers.  Nor inside a call that holds the pool's lock
        (``submit()``): ending workers take it.  The workers end once the
        handler returns."""
        if _compat.lock_level(self.collect_lock) or _compat.lock_level(self.lock):
            # (Or inside a call that holds the pool's lock, such as submit():
            # the workers need that lock to end, and a wait here would let go
            # of it in the middle of that call's step.)
            return
        if threading.get_ident() == self.resolver_ident:
            # (A done-callback: this thread delivers the results the workers
            # wait on to go on; it cannot wait for them too.  They end once
            # the callback returns.)
            return
        me = threading.current_thread()
        ended: set[threading.Thread] = set()
        grace_end: float | None = None
        with self.lock:
            while True:
                ended.update(w.thread for w in self.workers.values() if w.thread is not me)
                if any(not w.retired and w.thread is not me for w in self.workers.values()):
                    self.ready.wait()
                    continue
                if not any(w.thread is not me for w in self.workers.values()):
                    break
                # Only retired workers are left.  Work still queued (every slot
                # was held by a retired worker) runs once one of them ends and a
                # replacement takes its slot: wait for that too.
                if include_retired or (self.broken is None and self.work_left_locked()):
                    self.ready.wait()
                    continue
                if grace_end is None:
                    grace_end = time.monotonic() + self.interrupt_grace
                left = grace_end - time.monotonic()
                if left <= 0:
                    break
                self.ready.wait(left)
            retired = {w.thread for w in self.workers.values() if w.retired}
        for t in ended - retired:
            if t.is_alive():
                t.join()  # it has left its interpreter: only returning remains
        resolver = self.resolver_thread
        if resolver is not None and resolver is not me and all(w.thread is not me for w in list(self.workers.values())):
            resolver.join()
        if self.closed:
            close_spares_if_last()

    def terminate(self) -> None:
        """Cancel pending work, fail queued work, stop running tasks, stop workers."""
        self.release_future_locks()  # (as shutdown() does: see there)
        with self.lock:
            self.shutdown_flag = True
            try:
                self.repair_limbo_locked()  # (first: its items go where they are cancelled below)
                self.take_pending_to_cancel_locked()
                # What no worker has started yet, taken back (into ``taken_back``,
                # see there), and cancelled with the rest below.
                self.take_back_queued_locked()
            except BaseException:  # (a signal handler's: the resolver finishes what was left)
                self.wake_resolver()
                raise
        try:
            self.finish_cancelling()
        except BaseException:
            self.wake_resolver()  # (it finishes them)
            raise
        self.interrupt_running()
        with self.lock:
            failed = self.dispatch_locked() if self.started and not self.forked else []
        self.fail_items(failed)
        if self.started and not self.forked:
            self.wake_resolver()
            self.join()
        else:
            self.maybe_close()

    # ------------------------------------------------------------ os.fork()
    def park(self, timeout: float) -> bool:
        """Ask every worker to destroy its interpreter; True once none is left."""
        deadline = time.monotonic() + timeout
        with self.lock:
            if self.forked or not self.started or self.closed:
                return True
            # Workers finish their calls before they park; a call queued in a
            # pool not yet grown to max_workers may be what they wait for.  It
            # gets a worker first, as it would have with every worker started;
            # and workers still starting (grown just before) take theirs
            # before they are held back from entering an interpreter.
            queued = self.calls_queued_locked()
            if queued > 0 and self.broken is None:
                if self.wanted < self.max_workers:
                    self.wanted = min(self.max_workers, self.active + queued)
                    with _sigint.defer_sigint():  # (see start_locked)
                        self.start_locked()
                ready_by = min(deadline, time.monotonic() + FORK_START_WAIT)
                while not self._all_ready_locked() and (left := ready_by - time.monotonic()) > 0:
                    self.ready.wait(left)
            self.parking = True
            self.ctl[PARK] = 1
            for _ in [w for w in self.workers.values() if w.in_interp]:
                try:
                    os.write(self.tasks.wfd, b"\0")  # wake the sleepers; they see PARK
                except OSError:
                    break
                self.task_written += 1  # (its reader counts it read)
        with self.lock:
            while any(w.in_interp for w in self.workers.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.ready.wait(left)
        return True

    def unpark(self) -> None:
        with self.lock:
            if not self.parking:
                return
            self.parking = False
            self.ctl[PARK] = 0
            self.ready.notify_all()

    def forget_after_fork(self) -> None:
        """In the child of a fork: none of the worker threads and none of the
        interpreters exist here; refuse work without touching what was shared."""
        self.forked = True
        self.lock = _compat.RLock()
        self.ready = Events(self.lock)
        self.collect_lock = _compat.RLock()
        self.workers.clear()
        self.pending.clear()
        self.inflight.clear()
        self.unsettled.clear()
        self.parked.clear()  # (the parent's resolver settles those)
        self.inbox = collections.deque()
        self.arrived = collections.deque()
        self.held = collections.deque()
        self.stalled = {}
        self.dispatching = None
        self.limbo = []
        self.cancelling = {}
        self.taken_back = set()
        self.drained = collections.deque()
        self.repair_failed = []
        self.closed = True
        self.parking = False
        self.shutdown_flag = True
        if self.broken is None:
            self.broken = "this pool was created before os.fork() and cannot be used in the child; create a new one"


# ---------------------------------------------------------------- process-wide
_exiting = False
_exit_done = False  # _python_exit ran to its end: every pool has stopped


def exiting() -> bool:
    return _exiting


def _python_exit(abnormal: bool = False) -> None:
    """At interpreter exit, before threads are joined: stop every pool.  As with
    ThreadPoolExecutor and ProcessPoolExecutor, queued work still runs and exit
    waits for it; except when the program ends on an unhandled Ctrl-C
    (KeyboardInterrupt): then work not started is cancelled and running tasks are
    interrupted, so that the process ends promptly.

    A Ctrl-C must never cut this function short: CPython aborts ("Fatal Python
    error") when it finalizes while a worker still runs inside its interpreter.
    The exit guard (registered after this hook, so run just before it) has made
    a Ctrl-C only recorded since before this function's first bytecode.  After
    an unhandled Ctrl-C, Ctrl-Cs are then ignored until every pool has stopped;
    otherwise the first Ctrl-C during the waits raises (interrupting them) and
    turns the exit into an interrupted one, and the next ones are ignored.  Each
    switch of handler is one C call (``_IGNORE``, ``_SWAP``), with no Python frame
    where a KeyboardInterrupt could land before it takes effect; the waits run
    inside ``try`` blocks that catch the one that may come in between."""
    global _exiting, _exit_done
    _exiting = True
    # (The first handler saved is the program's own: a second guard may have saved
    # the first one's recorder after it.)
    before = _sigint.exit_before[0] if _sigint.exit_before else None
    _sigint.exit_before.clear()
    interrupted = abnormal or _compat.ended_on_unhandled_ctrl_c()
    pools = [p for p in list(LIVE_POOLS) if isinstance(p, Stopper)]
    to_join = [p for p in pools if not p.forked]  # (computed while no Ctrl-C can raise)
    previous = None  # the handler to give back at the end, once Ctrl-C is ignored
    if before is None:  # no guard (interpexec was imported outside the main thread)
        previous = _sigint.ignore_sigint() if interrupted else None
    elif interrupted:
        _IGNORE()  # (replaces the recorder: nothing can raise in between)
        previous = before
    try:
        for pool in pools:
            # What a Ctrl-C left held by this (the main) thread, which now holds
            # nothing of ours legitimately: the resolver must not wait for it.
            # (The futures' first: dispatch may hold the pool's lock while it
            # waits for one of them, and releasing the pool's own takes it.)
            pool.release_future_locks()
            pool.release_leaked_locks()
        remaining = list(pools)  # (a pool leaves once its shutdown returned)
        while True:
            try:
                if previous is None and before is not None:
                    # A normal exit: from here a Ctrl-C interrupts the waits (and
                    # is handled below).  One recorded meanwhile goes to the
                    # program's handler now, as if it came just after this.
                    handler = before
                    _SWAP(handler)
                    before = None
                    if _sigint.exit_caught:
                        caught = _sigint.exit_caught.popitem()
                        _sigint.exit_caught.clear()
                        if callable(handler):
                            handler(*caught)  # (the default one raises KeyboardInterrupt)
                        elif handler == _compat.SIG_DFL:
                            raise KeyboardInterrupt  # (rather than end the process mid-exit)
                while remaining:
                    remaining[0].shutdown(wait=True, cancel_futures=interrupted, interrupt_running=interrupted)
                    del remaining[0]
                break
            except (KeyboardInterrupt, SystemExit):  # (SystemExit: from a user's SIGINT handler)
                if previous is None:
                    previous = _IGNORE()
                interrupted = True
                for pool in pools:
                    pool.release_leaked_locks()
        # A retired worker still runs inside its interpreter (a call stuck in C,
        # or threads a task left), and CPython cannot finalize while one does:
        # exit waits for those, as it would for a worker process.
        remaining = to_join
        while True:
            try:
                while remaining:
                    remaining[0].join(include_retired=True)
                    del remaining[0]
                break
            except (KeyboardInterrupt, SystemExit):
                if previous is None:
                    previous = _IGNORE()
                for pool in pools:
                    pool.release_leaked_locks()
                    pool.interrupt_running()
        _exit_done = True
    finally:
        _sigint.exit_caught.clear()
        # Last: from here a Ctrl-C may raise again (every pool has stopped).
        if previous is not None:
            _sigint.restore_sigint(previous)
        elif before is not None:  # (the guard's recorder was never undone)
            _SWAP(before)


def _python_exit_again() -> None:
    """The second line of defence, among the ``atexit`` callbacks (which CPython
    runs after the threading exit hooks, before it finalizes interpreters): if
    _python_exit did not run to its end (a Ctrl-C in threading's own exit code
    before its hooks, or another library's exit hook that raised, ends that loop
    before it), stop every pool now, as after a Ctrl-C: queued work is cancelled
    and running tasks interrupted.  The atexit guard, called just before this
    (from C, with no Python frame), records Ctrl-Cs meanwhile."""
    if not _exit_done:
        _python_exit(abnormal=True)
    elif _sigint.exit_before:  # (stopped already: give the handler back)
        _SWAP(_sigint.exit_before[0])
        _sigint.exit_before.clear()
    # Interpreters kept for the items their workers put go now, their items
    # with them (as a worker process's unread items go with the program).
    _queue.release_kept("the program exits", warn=False)


_compat.register_atexit(_python_exit)
atexit.register(_python_exit_again)
if _compat.is_main_thread() and _compat.sigint_handler() is not None:  # (where the exit hooks will run)
    # Each guard is registered after the hook it protects: both lists run last first.
    _compat.register_atexit_unwrapped(_sigint.exit_guard())
    atexit.register(_sigint.exit_guard())
    _SWAP: Callable[[Any], Any] = _compat.sigint_swapper()  # SWAP(handler) -> the one it replaced, in C
    _IGNORE: Callable[[], Any] = functools.partial(_SWAP, _compat.SIG_IGN)
else:  # (no guard: before stays None, and the old way is taken)
    _SWAP = _compat.swap_sigint_handler
    _IGNORE = _sigint.ignore_sigint


#: How long os.fork() waits for running tasks to finish before forking anyway.
FORK_PARK_TIMEOUT = 30.0
#: How long a fork waits for the workers it starts for queued calls (see park).
FORK_START_WAIT = 5.0


def _before_fork() -> None:
    for pool in list(LIVE_POOLS):
        if isinstance(pool, Stopper) and not pool.park(FORK_PARK_TIMEOUT):
            print(
                "interpexec: os.fork() while tasks still run in subinterpreters after "
                f"{FORK_PARK_TIMEOUT:.0f} s; the child may crash (a CPython limitation)",
                file=sys.stderr,
            )
    _queue.release_kept("os.fork() needs every subinterpreter gone")


def _after_fork_in_parent() -> None:
    for pool in list(LIVE_POOLS):
        if isinstance(pool, Stopper):
            pool.unpark()


def _after_fork_in_child() -> None:
    # (First: the parent's pipe must not stay the child's token, whatever fails below.)
    _compat.forget_ctypes_token_after_fork()
    for pool in list(LIVE_POOLS):
        if isinstance(pool, Stopper):
            pool.forget_after_fork()
    LIVE_POOLS.clear()
    RESOLVERS.clear()  # (their threads are not in the child)
    # The child has copies of the parent's spare wake-up pipes: lending them
    # again would have both processes drain each other's wake-ups.
    _wakeup.forget_after_fork()
    _queue.forget_after_fork()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)
