"""The pool behind an executor: the concerns of :mod:`interpexec._state` stacked
into one object, plus ``stats()``.

Data flow of one ``submit()`` (modules in brackets)::

  caller thread                     main interpreter                      worker interpreters
  -------------                     ----------------                      -------------------
  submit(fn, *args)
    encode fn + args [_transport]
    PoolFuture [_future] --> pending deque --dispatch--> task Channel ----> serve() loop [_worker_main]
                              [_dispatch]   (window of   (_interpqueues      one per worker thread
                                             2N tasks)    + pipe)            [_worker], each with its
                                                                             own GIL; watchdog thread
                                                                             beside it [_watchdog]
                                                                                  |
  result() <-- PoolFuture <-- resolve <-- inbox <-- take_results <-- result Channel <-+
               settled by     [_resolver]                            (_interpqueues + pipe)
               the resolver thread, always; or, sooner, by the thread blocked in
               result() that the worker woke directly (a shortcut, never the only route)

  result()'s shortcut, interrupt()          [_waiting]
  interrupt() / shutdown(interrupt_running=True) --> command Channel --> watchdog
  shutdown / terminate / exit / os.fork()  [_stopping]
  worker start, retire, exit, broken pool  [_lifecycle]

Who resolves futures: the resolver thread ``<prefix>_resolver`` always does;
a thread blocked in ``result()``, a submitter finding the window full, and
``stats()`` may deliver results sooner.  Handling a result is idempotent and runs
user code (callbacks) with no lock of the pool held.
"""

from __future__ import annotations

import time

from ._compat import queue_count
from ._state import WorkItem
from ._stopping import Stopper, exiting

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Pool", "WorkItem", "exiting"]


class Pool(Stopper):
    def stats(self) -> dict[str, Any]:
        self.collect()  # count what has finished as finished
        ctl, layout = self.ctl, self.layout
        now = time.monotonic()
        with self.lock:
            workers = []
            for w in sorted(self.workers.values(), key=lambda w: w.slot):
                busy = (ctl[layout.busy_ns + w.slot] - w.base_busy_ns) / 1e9
                workers.append(
                    {
                        "slot": w.slot,
                        "thread": w.name,
                        "interpreter_id": w.interp_id,
                        "tasks_completed": ctl[layout.tasks_done + w.slot] - w.base_done,
                        "busy_seconds": busy,
                        "idle_seconds": max(0.0, now - w.born - busy),
                        "restarts": w.restarts,
                        "retired": w.retired,
                    }
                )
            pending = sum(1 for item in self.pending if not item.future.cancelled())
            # (and those a stop is cancelling, still pending: see Resolver.finish_cancelling)
            pending += sum(1 for item in self.cancelling.values() if not item.future.done())
            return {
                "max_workers": self.max_workers,
                "workers": workers,
                "pending": pending,
                "in_flight": len(self.inflight),
                # dispatched minus still queued: what the workers have taken
                "running": max(0, len(self.inflight) - (0 if self.closed else queue_count(self.tasks.qid))),
                "completed": self.completed,
            }
