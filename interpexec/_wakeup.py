# Wake-ups: the one way a blocked thread of interpexec is woken.
#
# Every blocking wait in interpexec blocks on the read end of a pipe (an OS
# primitive any interpreter can use, watched with ``poll``, which has no limit on
# descriptor numbers) and is woken by one byte written to the other end:
#
# * a worker waiting for tasks, and the resolver waiting for results
#   (:class:`interpexec._transport.Channel`; wake-only-if-asleep through the
#   control block: a sender writes only when the receiver published that it sleeps
#   and no byte is pending);
# * a thread blocked in ``Future.result()``, and an event loop awaiting a call
#   (:meth:`interpexec._waiting.Waiting.watch`: a pipe registered for one task;
#   only the worker finishing that task writes, and only while it is registered);
# * a task or thread blocked in :class:`interpexec.Queue` ``get``/``put`` (a pipe
#   per queue direction; every put/get writes, since sleepers sit in any interpreter).
#
# :func:`notify` writes (a full pipe means a wake-up is pending anyway; a closed
# one that nobody waits on any more), :func:`drain` reads what is pending,
# :func:`wait` blocks until readable or a deadline.  The pipes lent to waiters come
# from one free list (:func:`borrow` / :func:`give_back`): a worker may still write
# to a pipe just after its waiter stopped waiting, and a closed descriptor number
# can be reused for an unrelated file, so a pipe is not closed while any pool has
# workers, but kept for the next waiter (a stale byte costs at most one spurious
# wake-up, which every reader tolerates); the last pool to close calls
# :func:`close_free`.  Only the main interpreter borrows and gives back.
#
# This module is imported inside the workers: it imports nothing heavy.

import os
import select
import time

from . import _compat

__all__ = [
    "INTERRUPT_FDS",
    "borrow",
    "close_free",
    "drain",
    "give_back",
    "lent",
    "new_pipe",
    "notify",
    "try_borrow",
    "wait",
]

#: Thread ident -> read end of a pipe that the watchdog writes to after raising an
#: exception asynchronously in that thread (``PyThreadState_SetAsyncExc`` cannot
#: wake a blocked ``poll()``).  :func:`wait` watches it too and reads it, so the
#: exception fires.  Per interpreter.
INTERRUPT_FDS = {}  # type: dict[int, int]

#: The longest wait one poll() takes (its timeout is a C int of milliseconds,
#: about 24.8 days); longer waits are made of several.
MAX_POLL_MS = 2**31 - 1

#: Pipes :func:`try_borrow` lends at most at once (thousands of concurrent awaits
#: must not cost thousands of descriptors); beyond it callers fall back to a
#: done-callback or the resolver.
MAX_LENT = 64

Pipe = tuple[int, int]

# No lock: a Ctrl-C can land right after a ``with lock:`` acquired and leave the
# lock held for ever (CPython's "with is not signal safe"), and these are used
# from every waiting thread.  list.pop/append and set.add/discard are atomic.
_free = []  # type: list[Pipe]
_out = set()  # type: set[Pipe]  # pipes out through try_borrow (a soft bound: racing borrowers may pass it by one)


def new_pipe():  # type: () -> Pipe
    # A pipe whose ends never block: a full pipe means a wake-up is pending, and
    # a reader waits with :func:`wait` (or its own ``poll``) before it reads.
    r, w = os.pipe()
    os.set_blocking(r, False)
    os.set_blocking(w, False)
    return r, w


def notify(fd):  # type: (int) -> None
    # Write one wake-up byte.
    try:
        os.write(fd, b"\0")
    except OSError:
        pass  # full (a wake-up is pending anyway), or closed: nobody waits on it


def drain(fd):  # type: (int) -> int
    # Read every pending wake-up byte (the read end must not block); returns
    # how many there were.
    n = 0
    try:
        while chunk := len(os.read(fd, 4096)):
            n += chunk
            if chunk < 4096:
                break
    except BlockingIOError:
        pass
    return n


def wait(fd, deadline, *, interruptible=False, own_wfd=-1):  # type: (int, float | None, bool, int) -> bool
    # Block until ``fd`` is readable (True) or ``time.monotonic()`` passes
    # ``deadline`` (False; None waits for ever).  With ``interruptible``, the
    # calling thread's interrupt pipe is watched too, so that an exception the
    # watchdog raised in it fires at once.
    #
    # In the main thread a signal (Ctrl-C) always ends the wait: its handler runs
    # (and a KeyboardInterrupt propagates) even when the signal arrives just
    # before ``poll`` blocks.  A signal's C handler only sets a flag that the main
    # thread checks between bytecodes, so one landing after the last check is
    # noticed only once the blocking call returns (CPython's own lock waits have
    # the same race: a Ctrl-C could wait out every queued task).  A pipe installed
    # as the signal wake-up descriptor for the duration of the wait closes the
    # race: the handler also writes a byte, and ``poll`` sees it.  ``own_wfd``,
    # the write end of ``fd``'s pipe when no other thread reads that pipe, serves
    # (a signal is then a spurious wake-up, which the caller re-checks anyway);
    # else a spare pipe is borrowed.  When another descriptor is installed (an
    # event loop's) it stays, and the wait relies on EINTR alone.
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    intr = INTERRUPT_FDS.get(_compat.get_ident(), -1) if interruptible and INTERRUPT_FDS else -1
    if intr >= 0:
        poller.register(intr, select.POLLIN)
    if not _compat.is_main_thread():
        return _poll(poller, fd, intr, -1, deadline)
    # A KeyboardInterrupt can be raised whenever a Python-level call returns:
    # what was installed is recorded by C code (list.extend over map) before
    # Python can raise, and the finally undoes exactly that.
    spare: Pipe | None = None
    swapped: list[int] = []  # [previous] once ours is in; [previous, ours] once a foreign one is back
    wfd = own_wfd
    try:
        if wfd < 0:
            try:
                spare = borrow()
            except OSError:  # out of descriptors: EINTR alone
                return _poll(poller, fd, intr, -1, deadline)
            wfd = spare[1]
        swapped.extend(map(_compat.set_signal_wakeup_fd, (wfd,)))
        if swapped[0] != -1:  # another one (an event loop's): it stays
            swapped.extend(map(_compat.set_signal_wakeup_fd, (swapped[0],)))
            return _poll(poller, fd, intr, -1, deadline)
        sig = -1
        if spare is not None:
            sig = spare[0]
            poller.register(sig, select.POLLIN)
        return _poll(poller, fd, intr, sig, deadline)
    finally:
        if len(swapped) == 1:
            now = _compat.set_signal_wakeup_fd(swapped[0])  # back to what was there before
            if now != wfd:
                _compat.set_signal_wakeup_fd(now)  # a handler installed its own meanwhile: keep it
        if spare is not None:
            give_back(spare)


def _poll(poller, fd, intr, sig, deadline):  # type: (select.poll, int, int, int, float | None) -> bool
    while True:
        if deadline is None:
            ms: int | None = None
        else:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            ms = min(MAX_POLL_MS, max(1, int(left * 1000 + 0.999)))
        ready = poller.poll(ms)
        if not ready:
            continue
        fds = [ev_fd for ev_fd, _ in ready]
        if intr >= 0 and intr in fds:
            os.read(intr, 4096)  # the pending exception is raised at the next bytecode
            return True
        if sig >= 0 and sig in fds:
            drain(sig)  # its handler runs at the next bytecode (the loop's jump back)
            if fd not in fds:
                continue  # a handler that did not raise: wait on
        return True


def borrow():  # type: () -> Pipe
    # A pipe from the free list (or a new one); raises OSError when none can be
    # made.  Give it back with :func:`give_back`, never close it.
    try:
        return _free.pop()
    except IndexError:
        return new_pipe()


def try_borrow():  # type: () -> Pipe | None
    # Like :func:`borrow` for a wake-up shortcut: None when :data:`MAX_LENT`
    # pipes are out already or no descriptor is left (the caller then waits the
    # slower way).
    if len(_out) >= MAX_LENT:
        return None
    try:
        pipe = _free.pop()
    except IndexError:
        try:
            pipe = new_pipe()
        except OSError:  # out of descriptors: the caller waits without a pipe
            return None
    _out.add(pipe)
    return pipe


def lent():  # type: () -> list[Pipe]
    # The pipes out through :func:`try_borrow` now.
    return list(_out)


def give_back(pipe):  # type: (Pipe) -> None
    # Return a pipe to the free list, with nothing pending in it.
    drain(pipe[0])
    _out.discard(pipe)
    _free.append(pipe)


def forget_after_fork():  # type: () -> None
    # In a forked child: close its copies of the spare pipes and forget the
    # lent ones (the threads that borrowed them exist only in the parent).
    close_free()
    _out.clear()


def close_free():  # type: () -> None
    # Close the pipes on the free list.  Only when no worker of any pool exists
    # any more (none can write to them then): the last pool to close calls it.
    while True:
        try:
            r, w = _free.pop()
        except IndexError:
            return
        os.close(r)
        os.close(w)
