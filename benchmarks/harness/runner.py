"""Run the children (one fresh process per executor and round), follow their
progress, and clean up what they leave behind."""

from __future__ import annotations

import os
import sys
import time

from harness.config import PREFIX

TYPE_CHECKING = False
if TYPE_CHECKING:
    import subprocess
    from collections.abc import Callable
    from typing import Any, TextIO

    from harness.config import Config

    Record = dict[str, Any]

# benchmarks/: first on the children's PYTHONPATH, so that they (and every worker
# interpreter and process they start) import harness and _tasks from here.
BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_child(kind: str, cfg: Config, on_step: Callable[[str], None] | None = None) -> Record:
    """Measure ``kind`` in a fresh process; every step gets a value or an error.
    ``on_step(step)`` is called as each step finishes (for the progress bar)."""
    import json
    import subprocess
    import tempfile

    # -P: not the current directory first on the child's sys.path, where a
    # checkout's interpexec would shadow the one on PYTHONPATH (see
    # _util.setup_interpexec).
    cmd = [sys.executable, "-P", "-m", "harness.child", kind, json.dumps(cfg.to_dict())]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (BENCHMARKS, os.environ.get("PYTHONPATH")) if p))
    budget = cfg.timeout * (len(cfg.steps) + 1) + 60  # backstop; each step has its own timeout
    # Files, not pipes: orphaned grandchildren (process pool workers whose parent
    # died) must not keep us waiting for end-of-file.
    with tempfile.TemporaryFile("w+") as out_f, tempfile.TemporaryFile("w+") as err_f:
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out_f,
            stderr=err_f,
            env=env,
            start_new_session=True,  # its own process group, with its forkserver and workers
        )
        watcher = _StepWatcher(out_f.fileno(), on_step)
        try:
            killed = not _wait_exit(proc, budget, watcher.poll)
        finally:
            _kill_group_and_reap(proc)
        out_f.seek(0)
        err_f.seek(0)
        out, err = out_f.read(), err_f.read()
    started: list[str] = []
    results: dict[str, Record] = {}
    for line in out.splitlines():
        if not line.startswith(PREFIX):
            continue
        rec = json.loads(line[len(PREFIX) :])
        step = rec.pop("step")
        if rec.get("event") == "start":
            started.append(step)
        else:
            results[step] = rec
    stderr_tail = "\n".join(err.rstrip().splitlines()[-40:])
    setup = results.pop("setup", None)
    for step in cfg.steps:
        if step in results:
            continue
        if setup is not None:
            results[step] = setup if step == cfg.steps[0] else {"error": "not run: the executor could not be set up"}
        elif step in started:
            if "Timeout (" in err:
                why = f"hung: no result after {cfg.timeout:g} s (thread stacks in the JSON report)"
            elif killed:
                why = f"killed after the child's budget of {budget:g} s"
            else:
                why = f"the child process died (exit code {proc.returncode})"
            results[step] = {"error": why, "stderr": stderr_tail}
        else:
            results[step] = {"error": "not run: the child process ended before this step"}
    return {"results": results, "returncode": proc.returncode, "stderr": stderr_tail if proc.returncode else ""}


class _StepWatcher:
    """Reads the child's output file while the child runs (with pread: the file
    offset is shared with the child) and reports each finished step."""

    def __init__(self, fd: int, on_step: Callable[[str], None] | None) -> None:
        self.fd = fd
        self.on_step = on_step
        self.pos = 0
        self.partial = b""

    def poll(self) -> None:
        if self.on_step is None:
            return
        import json

        while chunk := os.pread(self.fd, 1 << 16, self.pos):
            self.pos += len(chunk)
            self.partial += chunk
        *lines, self.partial = self.partial.split(b"\n")
        marker = PREFIX.encode()
        for line in lines:
            if line.startswith(marker):
                try:
                    rec = json.loads(line[len(marker) :])
                except ValueError:
                    continue
                if rec.get("event") != "start" and rec.get("step") != "setup":
                    self.on_step(str(rec.get("step")))


def _wait_exit(proc: subprocess.Popen[bytes], timeout: float, poll: Callable[[], None] | None = None) -> bool:
    """Wait until ``proc`` exits, without reaping it when Linux allows (so its pid,
    which is also its process group id, stays ours), calling ``poll`` about four
    times a second meanwhile.  False on timeout."""
    import select
    import subprocess

    deadline = time.monotonic() + timeout
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # not Linux
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            try:
                proc.wait(min(left, 0.25))
            except subprocess.TimeoutExpired:
                if poll is not None:
                    poll()
            else:
                return True
    poller = select.poll()  # (not select(): descriptors can be >= 1024)
    poller.register(pidfd, select.POLLIN)
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if poller.poll(max(1, int(min(left, 0.25) * 1000))):
                return True
            if poll is not None:
                poll()
    finally:
        os.close(pidfd)


def _kill_group_and_reap(proc: subprocess.Popen[bytes]) -> None:
    """Kill whatever is left of the child's process group (leftover pool workers,
    or the child itself after a timeout), then reap the child."""
    import signal

    if proc.returncode is None:  # not reaped yet: the group id cannot have been reused
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


class Progress:
    """A text progress bar on stderr.  On a terminal it is redrawn in place as
    steps finish; otherwise one line (with the bar) is printed per finished child."""

    WIDTH = 30

    def __init__(self, total: int, stream: TextIO | None = None) -> None:
        self.total = max(1, total)
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.tty = self.stream.isatty()
        self.label = ""

    def bar(self) -> str:
        filled = self.WIDTH * self.done // self.total
        return f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {100 * self.done // self.total:3d}%"

    def advance(self, to: int, label: str | None = None) -> None:
        self.done = max(self.done, min(self.total, to))
        if label is not None:
            self.label = label
        if self.tty:
            self.stream.write(f"\r\x1b[K  {self.bar()}  {self.label}")
            self.stream.flush()

    def message(self, text: str) -> None:
        """A line that stays (one per finished child)."""
        if self.tty:
            self.stream.write(f"\r\x1b[K  {text}\n  {self.bar()}  {self.label}")
        else:
            self.stream.write(f"  {self.bar()}  {text}\n")
        self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
