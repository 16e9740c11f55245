"""``interpexec.Queue``: a FIFO queue that the parent and tasks in any worker share.

Pass a Queue to a task as an argument (or inside one): the worker gets a copy that
works on the same queue.  The items live in an ``_interpqueues`` queue (through
:mod:`interpexec._compat`).  Natively shareable scalars (None, bool, int within 64
bits, float, str, bytes) cross as they are; anything else, tuples included, crosses
as ``_transport.encode(obj, share_buffers=False)``, which is itself a tuple, so a
tuple that comes out of the queue is always such an envelope.

Blocking: each Queue has an "items" pipe (one byte written after every put) and,
when bounded, a "space" pipe (one byte written after every get).  A getter that
finds the queue empty blocks in ``poll()`` on the items pipe (releasing its GIL),
never by sleeping.  The protocol, for the items pipe (the space pipe mirrors it,
with "has room" for "has an item" and the roles of putters and getters swapped):

1. A put writes one byte after its item is queued; if the pipe is full the write
   is skipped (the pipe is then non-empty anyway).
2. A getter that finds the queue empty waits until the pipe is readable, reads
   every byte in it and looks at the queue again.
3. A getter that has read bytes writes one byte when it leaves (with an item, by
   timeout or by exception) if the queue is not empty then ("passes the baton").

No lost wake-up: let getter G block after finding the queue empty, and let an item
x be queued later.  Just after x's put wrote (or skipped) its byte, the pipe is
non-empty.  If it still is, G wakes.  Otherwise some getter H emptied it since, and
by 2 H looks at the queue after x was queued.  While x is queued the queue is not
empty, so H takes an item (x, or one ahead of x) rather than blocking again, or
leaves by an exception; either way, by 3, if x is still queued when H leaves, H
writes a byte after x was queued, and the same reasoning applies to that byte.
Each link of this chain ends one getter's wait, and only finitely many items are
ahead of x, so the chain ends with x taken or with a byte left in the pipe, which
wakes G.  Bytes and items need not match: get_nowait takes items without bytes,
and stale bytes only cause a spurious wake-up (the getter looks, finds nothing,
blocks again).  An exception that lands between reading and step 3 (an
asynchronous one) still passes the baton: step 3 is a ``finally``.

Lifetime: the creator holds the queue's first reference, and each unpickled copy
binds its own; each releases in ``__del__`` and the queue goes with the last one.
The pipes are never closed (a closed fd could be reused by some unrelated file and
receive our bytes): the creator's ``__del__`` parks them, and they return to
``_wakeup``'s free list only once their queue id no longer exists.  Queue ids
are never reused, and a copy exists only while it holds a reference (a copy
unpickled after the queue is gone fails to bind before it touches the pipes), so
by then no copy can use them.  Free lists are per interpreter: the pipes of Queues
created inside a worker are leaked, not reused, once that worker's interpreter is
gone.

Items put by a worker are bound to its interpreter: CPython removes them from
the queue when that interpreter is destroyed.  So a worker records the queues
it put into (``_put_into``), and when it ends (pool shutdown,
``max_tasks_per_child``, ``idle_timeout``) it names those that still hold items;
its interpreter is then kept (``keep_interpreter``), not destroyed, until those
queues are empty or gone, or until as many items were taken from them (by gets
in the main interpreter begun since) as they held then: they are FIFO.  A
main-interpreter ``get`` (the next one, before its take), ``qsize()``,
``empty()``, the next kept interpreter and pool shutdowns release those whose
items are taken;
``os.fork()`` (no interpreter may exist then) and interpreter exit destroy the
rest.  At most :data:`KEPT_MAX` are kept: past that the oldest is destroyed, and
a ``RuntimeWarning`` says that items it put may be lost.
"""

from __future__ import annotations

import collections
import os
import sys
import time

from . import _compat
from ._compat import QueueEmpty as Empty  # the class that queue.Empty is; importing queue costs a worker 2 ms
from ._transport import INT64_MAX, INT64_MIN, SCALARS, decode, encode
from ._wakeup import INTERRUPT_FDS, borrow, drain, give_back, notify, wait

TYPE_CHECKING = False  # typing is not imported at run time: the pool imports this module
if TYPE_CHECKING:
    from typing import Any

__all__ = ["INTERRUPT_FDS", "Queue"]

_EMPTY: Any = object()
_NO_PIPE = (-1, -1)

#: In a worker: the queues this interpreter put items into (None in the main one).
_put_into: set[int] | None = None if _compat.current_interpreter_id() == _compat.main_interpreter_id() else set()

#: In the main interpreter: ended workers' interpreters kept for the items they
#: put, oldest first (entries: see "interpreters kept for items" below).
_kept: list[list[Any]] = []
_kept_lock = _compat.allocate_lock()  # guards _kept and its entries, briefly
_release_lock = _compat.allocate_lock()  # held while kept interpreters are destroyed
_serial = 0  # of the last interpreter kept
_release_due = False  # a get saw kept interpreters' items all taken
_releasing: set[int] = set()  # threads in release_kept
#: The most interpreters kept at once (each a few MB).
KEPT_MAX = 32

Pipe = tuple[int, int]

# (queue id, pipes) of finalized creators whose queue may still be alive; the
# pipes go back to _wakeup's free list once it is gone.  deque appends and pops
# are atomic: __del__ may run in any thread at any moment, so no lock is taken.
_parked: collections.deque[tuple[int, tuple[Pipe, ...]]] = collections.deque()


def forget_after_fork() -> None:
    """In a forked child: close its copies of the parked pipes (their queues
    belong to the parent)."""
    while _parked:
        try:
            _, pipes = _parked.popleft()
        except IndexError:
            break
        for r, w in pipes:
            os.close(r)
            os.close(w)


def reclaim_parked() -> None:
    """Give back the parked pipes of Queues that no longer exist."""
    for _ in range(len(_parked)):
        try:
            qid, pipes = _parked.popleft()
        except IndexError:
            break
        if not _compat.queue_exists(qid):
            for pipe in pipes:
                give_back(pipe)
        else:
            _parked.append((qid, pipes))


def _take_pipe() -> Pipe:
    reclaim_parked()
    return borrow()


def _full() -> Exception:
    import queue

    return queue.Full()


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else time.monotonic() + timeout


class Queue:
    """A FIFO queue shared by the parent and the tasks of any worker.

    ``maxsize`` <= 0 means unbounded.  The API follows :class:`queue.Queue`:
    ``put``/``get`` block (on a pipe, releasing the GIL) unless ``block`` is false,
    for at most ``timeout`` seconds, then raise :class:`queue.Full` /
    :class:`queue.Empty`.  Natively shareable values (None, bool, int, float, str,
    bytes) cross as they are; anything else is pickled at ``put`` (an unpicklable
    item raises there).

    A copy must find the queue alive when it is unpickled.  The pool keeps a task's
    arguments alive until the task is done, but a Queue sent inside a task's result
    or inside an item of another Queue is only a pickle on the way: keep a reference
    to it until it has arrived.  Items a worker put stay after the pool shuts
    down or recycles that worker: its interpreter is kept (idle) until they are
    taken, at most 32 of them (``KEPT_MAX``; past that the oldest goes, and a
    ``RuntimeWarning`` says its items may be lost).  Around ``os.fork()`` and at
    exit, items not taken yet are dropped.
    """

    __slots__ = ("_items", "_owner", "_qid", "_space", "maxsize")

    def __init__(self, maxsize: int = 0) -> None:
        self._qid = -1
        self._owner = False
        self.maxsize = max(0, int(maxsize))
        self._qid = _compat.queue_create(self.maxsize)
        self._owner = True
        self._items = self._space = _NO_PIPE
        self._items = _take_pipe()
        if self.maxsize:
            self._space = _take_pipe()

    # ----------------------------------------------------------------- put
    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        if timeout is not None and timeout < 0:
            raise ValueError("'timeout' must be a non-negative number")
        tp = type(item)
        if not (tp in SCALARS or (tp is int and INT64_MIN <= item <= INT64_MAX)):
            item = encode(item, share_buffers=False)
        qid = self._qid
        if _put_into is not None:
            _put_into.add(qid)  # (see keep_interpreter)
        if not self.maxsize:
            _compat.queue_put(qid, item)
        elif not _compat.queue_put_nowait(qid, item):
            if not block:
                raise _full()
            self._put_slow(item, _deadline(timeout))
        notify(self._items[1])

    def _put_slow(self, item: Any, deadline: float | None) -> None:
        qid, (rfd, wfd) = self._qid, self._space
        woke = False
        try:
            while True:
                if not wait(rfd, deadline, interruptible=True):
                    raise _full()
                woke = True
                drain(rfd)
                if _compat.queue_put_nowait(qid, item):
                    return
        finally:
            if woke and not _compat.queue_is_full(qid):
                notify(wfd)

    def put_nowait(self, item: Any) -> None:
        self.put(item, False)

    # ----------------------------------------------------------------- get
    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        if timeout is not None and timeout < 0:
            raise ValueError("'timeout' must be a non-negative number")
        qid = self._qid
        if _release_due:
            release_kept()  # (before the take: a Ctrl-C meanwhile loses no item)
        began = _serial
        item = _compat.queue_get_counted(qid, _EMPTY) if _compat.queue_count(qid) else _EMPTY
        if item is _EMPTY:
            if not block:
                raise Empty
            item = self._get_slow(_deadline(timeout))
        if self.maxsize:
            notify(self._space[1])
        if _kept:
            _count_get(qid, began)  # (this may have been the last item a kept interpreter put)
        return decode(item) if type(item) is tuple else item

    def _get_slow(self, deadline: float | None) -> Any:
        qid, (rfd, wfd) = self._qid, self._items
        woke = False
        try:
            while True:
                if not wait(rfd, deadline, interruptible=True):
                    raise Empty
                woke = True
                drain(rfd)
                if _compat.queue_count(qid):
                    item = _compat.queue_get_counted(qid, _EMPTY)
                    if item is not _EMPTY:
                        return item
        finally:
            if woke and _compat.queue_count(qid):
                notify(wfd)

    def get_nowait(self) -> Any:
        return self.get(False)

    # ----------------------------------------------------------------- state
    def qsize(self) -> int:
        if _release_due:
            release_kept()
        return _compat.queue_count(self._qid)

    def empty(self) -> bool:
        if _release_due:
            release_kept()
        return not _compat.queue_count(self._qid)

    def full(self) -> bool:
        return bool(self.maxsize) and _compat.queue_is_full(self._qid)

    def __repr__(self) -> str:
        return f"<interpexec.Queue id={self._qid} maxsize={self.maxsize}>"

    # ----------------------------------------------------------------- lifetime
    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (self._qid, self.maxsize, self._items, self._space, os.getpid()))

    def __del__(self) -> None:
        qid, self._qid = self._qid, -1
        if qid < 0:
            return
        try:
            _compat.queue_release(qid)
            if self._owner:
                _parked.append((qid, tuple(p for p in (self._items, self._space) if p != _NO_PIPE)))
        except (AttributeError, TypeError):  # at interpreter exit, module globals already cleared
            pass


def _rebuild(qid: int, maxsize: int, items: Pipe, space: Pipe, pid: int) -> Queue:
    if pid != os.getpid():
        raise RuntimeError("an interpexec.Queue works only within the process that created it")
    self = Queue.__new__(Queue)
    self._qid = -1
    self._owner = False
    try:
        _compat.queue_bind(qid)
    except _compat.QueueNotFoundError:
        raise RuntimeError(
            f"interpexec.Queue {qid} no longer exists: every reference to it was dropped before this copy "
            "arrived. Keep a reference to a Queue sent in a queue item until it has arrived; to get a Queue "
            "out of a task, create it in the parent and pass it in."
        ) from None
    self._qid = qid
    self.maxsize = maxsize
    self._items = items
    self._space = space
    return self


# ------------------------------------------------- interpreters kept for items
# A kept interpreter's items are surely taken once the queue is empty, or once
# as many more items were taken from it as it held when the worker ended (FIFO:
# its items were among those).  Only gets in the main interpreter that began
# after the interpreter was kept count toward it; a get not counted (in a
# worker, or while the list is busy) only keeps an interpreter longer.
#
# A kept entry: [interpreter id, serial, {queue id: items still to take}].


def queues_holding_items() -> tuple[tuple[int, int], ...]:
    """In a worker about to end: (queue id, items held) for the queues it put
    into that still hold items (perhaps others' items too)."""
    if not _put_into:
        return ()
    held = ((qid, _compat.queue_count_if_open(qid)) for qid in _put_into)
    return tuple((qid, n) for qid, n in held if n)


def keep_interpreter(interp_id: int, held: tuple[tuple[int, int], ...], parking: bool = False) -> None:
    """Keep an ended worker's interpreter (nothing runs in it) until the items
    it put are taken (``held``: see :func:`queues_holding_items`); past
    :data:`KEPT_MAX`, destroy the oldest.  ``parking`` (``os.fork()`` is
    coming): destroy it now, saying so."""
    global _serial
    entry: list[Any] = [interp_id, 0, dict(held)]
    if parking:
        _destroy(entry, "os.fork() needs every subinterpreter gone")
        return
    with _kept_lock:  # (release_kept and _count_get only try it: they cannot wait for this)
        _serial += 1
        entry[1] = _serial
        _kept.append(entry)
        evicted = _kept[:-KEPT_MAX] if len(_kept) > KEPT_MAX else []
        del _kept[: len(evicted)]
    for old in evicted:
        _destroy(old, f"more than {KEPT_MAX} ended workers' interpreters were kept for them")
    release_kept()


def _count_get(qid: int, began: int) -> None:
    """A main-interpreter get that began at ``began`` took an item from ``qid``:
    it counts for the interpreters kept before it began.  Those whose items are
    all taken are destroyed by the next get (before it takes its item: a Ctrl-C
    during the destruction then loses none), ``qsize()``, ``empty()``, keep,
    pool shutdown, fork or exit."""
    global _release_due
    if not _kept_lock.acquire(blocking=False):
        return  # (not counted: only keeps them longer)
    try:
        due = False
        for entry in _kept:
            left = entry[2]
            if entry[1] <= began and left.get(qid, 0) > 0:
                left[qid] -= 1
                due = due or not any(n > 0 for n in left.values())
    finally:
        _kept_lock.release()
    if due or not _compat.queue_count_if_open(qid):
        _release_due = True


def _taken(entry: list[Any]) -> bool:
    return all(n <= 0 or not _compat.queue_count_if_open(qid) for qid, n in entry[2].items())


def release_kept(force: str = "", warn: bool = True) -> None:
    """Destroy the kept interpreters whose items were all taken; with
    ``force`` (why), all of them, after any release under way.  Unforced,
    skipped while another release runs (the next one catches up).  Never
    nested in one in the same thread (a signal handler's get, say, would wait
    for locks its thread holds); a Ctrl-C waits until the interpreters it took
    are destroyed (one left kept would crash a forked child)."""
    global _release_due
    me = _compat.get_ident()
    if me in _releasing or not _release_lock.acquire(blocking=bool(force)):
        return
    _releasing.add(me)
    _release_due = False
    try:
        from ._sigint import defer_sigint  # (main interpreter only)

        with defer_sigint():
            with _kept_lock:
                done = [k for k in _kept if force or _taken(k)]
                for k in done:
                    _kept.remove(k)
            for entry in done:
                _destroy(entry, force if warn else "")
    finally:
        _releasing.discard(me)
        _release_lock.release()


def _destroy(entry: list[Any], why: str) -> None:
    interp_id, _, left = entry
    # (Items it may still have there: at most what was left to take of each.)
    maybe = sum(min(_compat.queue_count_if_open(qid), n) for qid, n in left.items() if n > 0)
    try:
        _compat.destroy_interpreter(interp_id)
    except Exception as exc:  # should not happen; say so and go on
        print(f"interpexec: could not destroy interpreter {interp_id}: {exc!r}", file=sys.stderr)
    if why and maybe:
        import warnings

        message = (
            f"interpexec: an ended worker's interpreter was destroyed ({why}) before the items it put into "
            f"interpexec.Queue(s) were seen taken: up to {maybe} of them may be gone (gets are counted in the main "
            "interpreter only). Take items from the queue sooner."
        )
        try:
            warnings.warn(message, RuntimeWarning, stacklevel=2)
        except Exception:  # warnings as errors: this may run in a worker's thread, which must go on
            print(message, file=sys.stderr)
