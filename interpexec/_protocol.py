# The messages that cross between the main interpreter and the workers.
#
# Both sides import this module, so every message kind has one name and one
# number here, and nothing else is ever sent: no source code, no strings to
# parse.  Every message is a tuple of natively shareable values (None, bool,
# int, float, str, bytes and tuples of them, see :mod:`interpexec._transport`),
# or one int (a task sent through its call cell, or one that returned None), so
# the queues never pickle anything themselves.
#
# Channels and their messages::
#
#   hand-off queue (one per worker; main -> worker once, then worker -> main once)
#       main puts    (control memoryview, WorkerSettings.to_wire())
#       worker puts  (EXIT, reason)             why serve() returned (EXIT_* below)
#
#   task channel (shared by the workers; main -> workers)
#       (tid, CALL,  fn, encoded (args, kwargs items), timeout or None)
#       (tid, CHUNK, fn, encoded argument columns,       timeout or None)
#       (tid, NAMED, module, qualname, timeout or None, *args)
#       tid       a NAMED message the dispatcher wrote into the task's call cell
#                 (see _transport's control block), marshalled: a bare int
#       (0,   STOP)
#       fn: (module, qualname) for a function found by that name, else a pickle
#       NAMED: the common case, flat: a function found by name, called with a
#       few positional arguments that all cross natively
#
#   result channel (workers -> main)
#       tid                                      the task returned None: a bare int
#       (tid, VALUE,   value)                    a value that crosses natively, flat
#       (tid, OK,      encoded value)            any other; a CHUNK's value is a tuple of results
#       (tid, ERR,     packed exception)
#       (tid, TIMEOUT, seconds)                  from the watchdog, at the deadline
#       (tid, STOPPED, None)                     interrupted or skipped as asked
#       (-1,  EVENT,   worker slot, event, data) EV_* below
#
#   command channel (one per worker; main -> that worker's watchdog)
#       (INTERRUPT, tid)        stop task tid if it runs (one not started yet is
#                               skipped: the pool marks it in the control block,
#                               and the worker, before it starts a task, reads
#                               these itself if its watchdog has not yet)
#       (INTERRUPT, INIT_TID)   stop the initializer if it runs
#       (CMD_STOP,)             the watchdog ends (sent by the worker itself)
#
# The flat forms exist for speed: each tuple level a message has costs both
# interpreters an allocation, a conversion and (for the sender) a release call
# queued by the receiver; a flat message of a no-op call costs about a third less.
# A bare int needs no release call at all.  A task that returned None is one:
# the main interpreter queues no release into the worker, which the worker would
# contend for with the main interpreter's own (the main side keeps it as it
# is, an int, and reads it as ``(tid, VALUE, None)``: see ``Resolver._handle``).  A NAMED
# task dispatched beside others in flight is one too when its call cell is free
# and the message fits (``Dispatcher._in_cell``): on a busy machine the release
# call a tuple makes the main interpreter run when a worker takes it cost it
# about 1.5 us per task, a fifth of its share of a no-op; marshalling into the
# cell costs it about 0.2 us.
#
# Beside the messages, the one exception that is part of the worker side's
# vocabulary: :class:`Interrupted`, which the watchdog raises in a task to stop
# it and which the loop, and the code that packs a task's exception, let
# through (here, not in ``_errors``: a worker loads that only when a task fails).
#
# This module is imported inside every worker: it imports nothing.

TYPE_CHECKING = False  # typing is not imported: this module loads in every worker
if TYPE_CHECKING:
    from typing import Any  # noqa: F401 (used in type comments)


class Interrupted(BaseException):
    """Raised inside a running task, by its worker's watchdog, to stop it
    (deadline passed or interrupt()).

    A BaseException, so ``except Exception`` in user code does not swallow it;
    ``finally`` blocks and context managers run as usual.  The code that packs
    a task's exception (``_errors``), which catches everything a user's
    ``__str__`` or ``__reduce__`` may raise, lets it through: the worker reports
    the task as stopped."""


# task kinds
CALL = 0
CHUNK = 1
STOP = 2
NAMED = 3

# result kinds
OK = 0
ERR = 1
EVENT = 2
TIMEOUT = 3
STOPPED = 4
VALUE = 5

# value encodings (see _transport.encode): the first item of an encoded value
NATIVE = 0
PICKLED = 1
LENT = 2  # a result that is a view lent by the caller: (LENT, buffer index, format, shape)
#: A result that is one of the call's own positional arguments, unchanged: a large
#: ``bytes`` or ``str`` (immutable), which the caller already holds: (SAME_ARG, index).
#: It goes back as that reference instead of a second copy of the payload.
SAME_ARG = 3

#: An ERR's packed exception when nothing of it could be packed (no memory even
#: for its type name): (pickle, type name, message, traceback, cause, name), see
#: ``_errors.pack_exception``.
UNREPORTABLE = (None, "Exception", "<the exception could not be reported>", "", None, None)


def qualified_type_name(tp):  # type: (type) -> str
    # An exception type's name as a packed exception carries it: qualified by
    # its module unless it is a builtin.
    return tp.__qualname__ if tp.__module__ == "builtins" else f"{tp.__module__}.{tp.__qualname__}"


def bare_report(exc):  # type: (BaseException) -> tuple[Any, ...]
    # ``exc`` packed as text only, its type's name and its message: what a
    # worker sends when ``_errors`` (the full packing) cannot load (the task broke
    # imports, no descriptor or memory is left).  Never raises but Interrupted.
    try:
        return (None, qualified_type_name(type(exc)), str(exc), "", None, None)
    except Interrupted:
        raise
    except BaseException:  # (a __str__ that raises; no memory)
        return UNREPORTABLE


# events (data in brackets)
EV_STARTED = 0  # ready to take tasks, after the initializer [interpreter id]
EV_INIT_FAILED = 1  # the initializer raised or timed out [packed exception]
EV_STUCK = 2  # a stopped task did not return to Python within the grace [(tid, interpreter id)]
EV_LOG = 3  # a logging record [its fields, see _worker_log.install_handler]
EV_THREADS_LEFT = 4  # threads a task left running when the interpreter ended [(names, interpreter id)]

# commands
INTERRUPT = 0
CMD_STOP = 1

#: The task id the initializer runs under (for deadlines and interrupts).
INIT_TID = -2

# The hand-off queue's message from the worker, and why serve() returned.
EXIT = 0
EXIT_STOP = 0  # STOP taken: the worker ends
EXIT_RECYCLE = 1  # max_tasks_per_child reached: start a fresh interpreter
EXIT_IDLE = 2  # idle longer than idle_timeout: release the interpreter
EXIT_RETIRED = 3  # stuck or timed out; a replacement already runs
EXIT_PARK = 4  # os.fork() is coming: no interpreter may exist; a fresh one follows
EXIT_INIT_FAILED = 5  # the initializer failed (reported as EV_INIT_FAILED)


class WorkerSettings:
    # What a worker needs to know, sent as data over its hand-off queue.

    __slots__ = (
        "commands",
        "ctypes_token",
        "grace",
        "idle_timeout",
        "index",
        "init_blob",
        "init_timeout",
        "interrupt_pipe",
        "log_level",
        "main_name",
        "main_path",
        "max_tasks",
        "results",
        "slots",
        "tasks",
        "thread_grace",
        "wake_fd",
    )

    def __init__(
        self,
        *,
        slots,  # type: int
        index,  # type: int
        tasks,  # type: tuple[int, int, int]
        results,  # type: tuple[int, int, int]
        commands,  # type: tuple[int, int, int]
        interrupt_pipe,  # type: tuple[int, int]
        max_tasks,  # type: int
        idle_timeout,  # type: float | None
        grace,  # type: float
        init_blob,  # type: bytes | None
        init_timeout,  # type: float | None
        main_path,  # type: str | None
        main_name,  # type: str | None
        log_level,  # type: int | None
        thread_grace,  # type: float
        wake_fd,  # type: int
        ctypes_token,  # type: tuple[int, int]
    ):
        # type: (...) -> None
        self.slots = slots
        self.index = index
        self.tasks = tasks
        self.results = results
        self.commands = commands
        self.interrupt_pipe = interrupt_pipe
        self.max_tasks = max_tasks
        self.idle_timeout = idle_timeout
        self.grace = grace
        self.init_blob = init_blob
        self.init_timeout = init_timeout
        self.main_path = main_path
        self.main_name = main_name
        self.log_level = log_level
        self.thread_grace = thread_grace
        self.wake_fd = wake_fd  # the read end of this worker's own wake-up pipe
        self.ctypes_token = ctypes_token  # the process's (read end, write end): see _compat.ctypes_token

    def to_wire(self):  # type: () -> tuple[Any, ...]
        return tuple(getattr(self, name) for name in WorkerSettings.__slots__)

    @classmethod
    def from_wire(cls, wire):  # type: (tuple[Any, ...]) -> WorkerSettings
        if len(wire) != len(cls.__slots__):
            raise ValueError(f"worker settings of {len(wire)} fields, expected {len(cls.__slots__)}")
        return cls(**dict(zip(cls.__slots__, wire, strict=True)))
