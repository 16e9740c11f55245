# How tasks and results travel between the main interpreter and the workers.
#
# Two pieces, both usable from any interpreter (this module is imported inside the
# workers, so it imports nothing heavy):
#
# * :class:`Channel`: a cross-interpreter queue (``_interpqueues``, through
#   :mod:`interpexec._compat`) plus a wake-up pipe.  The sender puts an item, then
#   writes one byte; a receiver that finds the queue empty blocks in ``os.read`` on
#   the pipe (releasing its GIL) instead of sleeping and polling.
# * :func:`encode` / :func:`decode`: values that are natively shareable (None, bool,
#   int within 64 bits, float, str, bytes, and tuples of these) cross as they are,
#   with no pickling (``bytes`` is copied once, on receipt).  Everything else goes as
#   pickle protocol 5; out-of-band buffers (``bytearray``, ``PickleBuffer``s) travel
#   beside the pickle as memoryviews when the sender outlives the receiver (main to
#   worker), and as bytes otherwise.

import os
import sys

from . import _compat
from ._protocol import NATIVE
from ._wakeup import notify

TYPE_CHECKING = False  # typing is not imported: this module loads in every worker
if TYPE_CHECKING:
    from collections.abc import Callable  # noqa: F401 (used in a type comment)
    from typing import Any

SAME_ARG_MIN = 64 * 1024  # below this, copying is as cheap as the check (see _protocol.SAME_ARG)

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
SCALARS = (type(None), bool, float, str, bytes)
_MAX_TUPLE = 4096  # longer tuples are pickled: checking them costs more than it saves


def is_native(obj, _depth=0):  # type: (Any, int) -> bool
    # True when ``obj`` crosses interpreters natively and comes out equal and of
    # the same type (exact types only: subclasses such as IntEnum are pickled).
    tp = type(obj)
    if tp in SCALARS:
        return True
    if tp is int:
        return bool(INT64_MIN <= obj <= INT64_MAX)
    if tp is tuple:
        if _depth > 8 or len(obj) > _MAX_TUPLE:
            return False
        for item in obj:
            if not is_native(item, _depth + 1):
                return False
        return True
    return False


Encoded = tuple["Any", ...]


_FLAT_OK = frozenset(SCALARS)


def _flat_native(items):  # type: (tuple[Any, ...]) -> bool
    # Like ``all(map(is_native, items))`` for long flat tuples, at C speed for the
    # common cases (one type check per item instead of a Python call).
    kinds = set(map(type, items))
    if kinds <= _FLAT_OK:
        return True
    if kinds - _FLAT_OK == {int}:
        ints = [x for x in items if type(x) is int] if len(kinds) > 1 else items
        return INT64_MIN <= min(ints) and max(ints) <= INT64_MAX
    return all(map(is_native, items))


def encode_columns(columns, *, share_buffers):  # type: (tuple[tuple[Any, ...], ...], bool) -> Encoded
    # Encode a tuple of equally long tuples (a map chunk's argument columns, or a
    # chunk's results as one column) without a per-item Python call when every
    # item is a shareable scalar.
    for col in columns:
        if not _flat_native(col):
            return encode(columns, share_buffers=share_buffers)
    return (NATIVE, columns)


def encode_flat(items, *, share_buffers, snapshot=False):  # type: (tuple[Any, ...], bool, bool) -> Encoded
    # Encode a flat tuple (a chunk's results) like :func:`encode_columns`.
    if _flat_native(items):
        return (NATIVE, items)
    return encode(items, share_buffers=share_buffers, snapshot=snapshot)


def few_native_args(args):  # type: (tuple[Any, ...]) -> bool
    # True for the common case of a few positional arguments that all cross
    # natively (checked without a Python call per scalar).
    if len(args) > 8:
        return False
    for a in args:
        tp = type(a)
        if tp in SCALARS or (tp is int and INT64_MIN <= a <= INT64_MAX) or (tp is tuple and is_native(a)):
            continue
        return False
    return True


def encode(obj, *, share_buffers, snapshot=False):  # type: (Any, bool, bool) -> Encoded
    # Turn ``obj`` into a natively shareable tuple: as it is when it crosses
    # natively, else pickled (see :func:`interpexec._pickled.encode_pickled`,
    # loaded with the first value that needs it).  Raises whatever pickling
    # raises.
    if is_native(obj):
        return (NATIVE, obj)
    pickled = _encode_pickled
    if pickled is None:
        pickled = _load_pickled()
    return pickled(obj, share_buffers, snapshot)


_encode_pickled = None  # type: Callable[[Any, bool, bool], Encoded] | None  # (_pickled's, once loaded)


def _load_pickled():  # type: () -> Callable[[Any, bool, bool], Encoded]
    # Load the pickling half of encoding, once (an import statement per call
    # cost about as much as pickling a small dict).
    global _encode_pickled
    from ._pickled import encode_pickled

    _encode_pickled = encode_pickled
    return encode_pickled


_TAKEN = object()  # type: Any  # (what Channel.drain's get returns from an emptied queue)


def load_callable(ref):  # type: (bytes | tuple[str, str]) -> Any
    # The callable a task names.  A ``(module, qualified name)`` reference (see
    # ``_pickling.encode_callable``) is looked up the way pickle looks up a global:
    # import the module, then each attribute of the dotted name; anything else is
    # a pickle (a callable sent by value, or one pickle could only reduce).
    if not isinstance(ref, tuple):
        return _compat.loads(ref)
    module, qualname = ref
    sys.audit("pickle.find_class", module, qualname)
    __import__(module)
    obj = found = sys.modules[module]
    try:
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except AttributeError:  # (worded as pickle words it, per version)
        if _compat.VERSION < (3, 14):
            raise AttributeError(f"Can't get attribute {qualname!r} on {found!r}") from None
        if "." in qualname:
            raise AttributeError(f"Can't resolve path {qualname!r} on module {module!r}") from None
        raise
    return obj


def decode(enc):  # type: (Encoded) -> Any
    if enc[0] == NATIVE:
        return enc[1]
    if len(enc) == 2:
        return _compat.loads(enc[1])
    return _compat.loads(enc[1], buffers=enc[2])


class Channel:
    # A one-way cross-interpreter queue with a pipe for blocking wake-ups.
    #
    # Construct it in the main interpreter, hand ``spec()`` to a worker and rebuild
    # it there with ``Channel.from_spec``.  Only the creator closes it.

    __slots__ = ("_owner", "qid", "rfd", "wfd")

    def __init__(self, blocking_read=True):  # type: (bool) -> None
        self.qid = _compat.queue_create()
        self.rfd, self.wfd = os.pipe()
        os.set_blocking(self.wfd, False)  # a full pipe means a wake-up is pending anyway
        # Readers that poll first (with a timeout) need a read end that never
        # blocks: several may wake for one byte, and only one gets it.
        os.set_blocking(self.rfd, blocking_read)
        self._owner = True

    @classmethod
    def from_spec(cls, spec):  # type: (tuple[int, int, int]) -> Channel
        self = cls.__new__(cls)
        self.qid, self.rfd, self.wfd = spec
        self._owner = False
        return self

    def spec(self):  # type: () -> tuple[int, int, int]
        return (self.qid, self.rfd, self.wfd)

    def put(self, item):  # type: (Any) -> None
        _compat.queue_put(self.qid, item)
        self.notify()

    def notify(self):  # type: () -> None
        if self.wfd >= 0:
            notify(self.wfd)

    def get_nowait(self, default=None):  # type: (Any) -> Any
        # Return the next item, or ``default`` when there is none.
        return _compat.queue_get(self.qid, default)

    def drain(self):  # type: () -> list[Any]
        # Take every item now queued (checking the count first is much cheaper than
        # the exception an empty get raises).  Another thread may take some of them
        # meanwhile (a worker's loop and its watchdog both read its commands).
        qid = self.qid
        out: list[Any] = []
        while n := _compat.queue_count(qid):
            for _ in range(n):
                item = _compat.queue_get(qid, _TAKEN)
                if item is _TAKEN:
                    return out
                out.append(item)
        return out

    def close(self):  # type: () -> None
        if not self._owner:
            return
        self._owner = False
        _compat.queue_destroy(self.qid)
        rfd, wfd = self.rfd, self.wfd
        self.rfd = self.wfd = -1
        # Closed for good (not returned to the free list): the pool closes its
        # channels only once no thread of its own can write to them any more.
        os.close(rfd)
        os.close(wfd)


# --------------------------------------------------------------------------
# The control block: a small int64 array in main-interpreter memory that every
# worker sees through a writable memoryview.  It lets each side skip the wake-up
# write (a syscall that costs several microseconds and makes the writer give up
# its GIL) when the other side is awake or already has a wake-up pending, and lets
# a worker wake the very thread that waits for its result.
#
#   [COLLECTOR_ASLEEP]            1 while the resolver thread blocks on its pipe
#   [COLLECTOR_READ]              wake-up bytes the resolver has read (main writes)
#   [WORKERS]                     the pool's worker count
#   [PARK]                        1 while the pool asks every worker to leave its
#                                 interpreter for a moment (around os.fork())
#   [TASKS_PUT]                   tasks the dispatcher put, each counted before
#                                 its put
#   [USED_SEQ]                    the last stamp a worker took as it reported a
#                                 result (workers write it: a tie only orders two
#                                 workers arbitrarily)
#   [RESULTS_TAKEN]               changes each time a thread of the main
#                                 interpreter takes results off the queue: a
#                                 worker lingering after its result asks the
#                                 queue whether it was taken only when this
#                                 changed (threads of the main interpreter
#                                 write it, one whole step under its GIL)
#   [ASLEEP + i]                  1 while worker i blocks on the task pipe
#   [TASK_READ + i]               task wake-up bytes worker i has read
#   [RESULT_WRITTEN + i]          result wake-up bytes worker i has written
#   [TASKS_DONE + i], [BUSY_NS + i]  tasks worker i finished, and the nanoseconds it
#                                 spent running them (for executor.stats())
#   [WAITER_FDS + tid % nslots]   write-end fd + 1 of the pipe of a thread blocked in
#                                 Future.result() for task tid, else 0 (nslots: a
#                                 power of two, at least 8x the worker slots, at
#                                 most NSLOTS; ControlLayout.nslots)
#   [WAITER_TIDS + tid % nslots]  that task's id: a worker wakes the waiter only if
#                                 the id is its task's (written before the fd)
#   [STOP_TIDS + tid % nslots]    tid, once interrupt() was asked for task tid: a
#                                 worker that takes it from the queue later skips
#                                 it (checked by the worker itself, at once; its
#                                 watchdog may not have read the command yet)
#   [SPINNING + i]                1 while worker i lingers for a task before it
#                                 sleeps: it looks at the queue at least once
#                                 more, and clears this before it takes a task,
#                                 so a sender need not wake a sleeper for as many
#                                 tasks as there are lingering workers
#   [CELLS + (tid % ncells) * CELL_WORDS]  the call cell of task tid, when the
#                                 task was sent as its bare id: its message,
#                                 marshalled (written before the id is put on
#                                 the queue; not written again until the
#                                 worker's report for that task has come back)
#
# Every entry has a single writer.  A sender puts on the queue, then reads the
# flags and counters; it writes a wake-up byte only if somebody sleeps and no
# byte is pending (bytes written - bytes read <= 0).  A receiver publishes
# "asleep", looks at the queue once more, then blocks.  The queue's mutex orders
# the two sides, which suffices where a store followed by a locked operation is
# ordered (x86's total store order).  Elsewhere every wake-up is written.
#
# A waiter's wake-up is only ever a shortcut: a thread woken that way collects
# every queued result, and one that stops waiting first wakes the resolver, which
# collects whatever nobody else did.

SKIP_WAKEUPS = os.uname().machine.lower() in ("x86_64", "amd64", "i386", "i686", "x86")
NSLOTS = 4096  # the most task-id slots, and the largest window
COLLECTOR_ASLEEP = 0
COLLECTOR_READ = 1
PARK = 2
WORKERS = 3  # the pool's max_workers (read by workers to size their idle spin)
TASKS_PUT = 4  # tasks the dispatcher put (what a lingering worker watches)
USED_SEQ = 5  # the last stamp a worker took as it reported a result (see ControlLayout.used_stamp)
RESULTS_TAKEN = 6  # changes with each take of results in the main interpreter
_FIXED = 7
#: A call cell: a task's message, marshalled (its first item is the task id;
#: marshal ignores what follows it, an older message's end).
CELL_WORDS = 32
CELL_BYTES = 8 * CELL_WORDS
NCELLS_MAX = 4096  # (1 MiB of cells at most)


class ControlLayout:
    # Offsets into the control block for ``slots`` worker slots (more slots than
    # workers: a retired worker keeps its slot until its thread ends).
    #
    # The per-task entries have ``nslots`` slots, ``tid % nslots``: a collision (two
    # tasks in flight at once on one slot) only costs a waiter its shortcut, so a
    # few times the window suffices, and a small pool's block stays a few KB (the
    # block is zero-filled memory of the main interpreter: 4096 slots were 96 KB).

    __slots__ = (
        "asleep",
        "busy_ns",
        "cells",
        "ncells",
        "nslots",
        "result_written",
        "size",
        "slots",
        "spinning",
        "stop_tids",
        "task_read",
        "task_taken",
        "tasks_done",
        "used_stamp",
        "waiter_fds",
        "waiter_tids",
        "wake_read",
    )

    def __init__(self, slots):  # type: (int) -> None
        self.slots = slots
        self.nslots = nslots = min(NSLOTS, max(256, 1 << (8 * slots).bit_length()))
        self.asleep = _FIXED
        self.task_read = self.asleep + slots
        self.result_written = self.task_read + slots
        self.tasks_done = self.result_written + slots
        self.busy_ns = self.tasks_done + slots
        self.waiter_fds = self.busy_ns + slots
        self.waiter_tids = self.waiter_fds + nslots
        self.stop_tids = self.waiter_tids + nslots
        self.spinning = self.stop_tids + nslots
        self.task_taken = self.spinning + slots
        # Call cells: a power of two, at least twice the window (the most tasks
        # in flight, max(2 * max_workers, 8) for slots = 2 * max_workers + 4),
        # so that a task id's cell is nearly always free when it is dispatched.
        self.ncells = min(NCELLS_MAX, 1 << (2 * slots - 1).bit_length())
        # When each worker last reported a result (a stamp from USED_SEQ), and
        # the wake-ups it read on its own pipe: the dispatcher wakes the
        # sleeper used last, there (see Dispatcher._wake_a_worker).
        self.used_stamp = self.task_taken + slots
        self.wake_read = self.used_stamp + slots
        self.cells = self.wake_read + slots
        self.size = self.cells + self.ncells * CELL_WORDS
