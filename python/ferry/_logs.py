"""ferry's C++ log lines, handed to Python's `logging`.

Each line goes to the logger "ferry.<subsystem>" ("ferry.engine", "ferry.tcp",
"ferry.local", "ferry.directory", "ferry.options", "ferry.cuda") at the
matching level (error, warning, info, debug, and TRACE = 5), beside the
facades' own "ferry.p2p" and "ferry.mooncake": one tree under "ferry". A
record's time is when the C++ line was written, its threadName the C++
thread's ("ferry-tx-eth1-0"), its message starts with "engine 1a2b3c4d: " when
the line is about one engine, and `record.ferry_engine` holds that engine's
whole id (None otherwise).

Which lines exist is FERRY_LOG's (or Options.log_level's) choice, default
warn; `logging` then filters and routes them as configured. While nothing
handles the "ferry" loggers (no handler anywhere on their way to the root),
lines are printed on stderr exactly as C++ prints them.

How: C++ threads never take the GIL to log. They put lines in ferry's bounded
queue (4096 lines; past that a line is dropped and counted, and a warning says
how many), and the daemon thread "ferry-log" takes them, with the GIL released
while it waits, and calls `logging`. The thread starts with the first Engine
or Directory, and stops at interpreter exit after handing on what was queued.
FERRY_LOG_STDERR=1, or ferry.logs_to_python(False), keeps lines on stderr.
"""

import atexit
import logging
import os
import sys
import threading
from typing import Optional, Tuple

from . import _ferry

# Lines held while the reader is behind; past this, lines are dropped and counted.
CAPACITY = 4096
# logging's level for ferry's trace lines.
TRACE = 5

_LEVELS = {"error": logging.ERROR, "warn": logging.WARNING, "info": logging.INFO, "debug": logging.DEBUG,
           "trace": TRACE}

_lock = threading.Lock()
_thread: Optional[threading.Thread] = None
_generation = 0  # bumped by every start: a reader of an older one ends (stop lets it drain the queue first)
_to_stderr = os.environ.get("FERRY_LOG_STDERR", "") not in ("", "0")
_exit_hook = False

if logging.getLevelName(TRACE) == f"Level {TRACE}":
    logging.addLevelName(TRACE, "TRACE")


def start() -> None:
    """Sends ferry's lines to `logging` through the reader thread, unless it
    runs already or lines were kept on stderr. Does not block."""
    global _thread, _generation, _exit_hook
    with _lock:
        if _to_stderr or (_thread is not None and _thread.is_alive()):
            return
        _generation += 1
        _ferry._log_queue(CAPACITY)
        _thread = threading.Thread(target=_read, args=(_generation,), name="ferry-log", daemon=True)
        _thread.start()
        if not _exit_hook:
            # Runs before logging's own exit hook (registered when logging was
            # imported, earlier), so the last lines still find their handlers.
            atexit.register(stop)
            _exit_hook = True


def stop(timeout: float = 5.0) -> None:
    """Lines go to stderr again; waits up to `timeout` seconds for the reader
    to hand on what was queued and end."""
    global _thread
    with _lock:
        reader, _thread = _thread, None
        _ferry._log_to_stderr()
    if reader is not None and reader is not threading.current_thread():
        reader.join(timeout)


def to_python(enable: bool) -> None:
    """ferry.logs_to_python: see its docstring."""
    global _to_stderr
    _to_stderr = not enable
    if enable:
        start()
    else:
        stop()


def _read(generation: int) -> None:
    dropped_told = 0
    while True:
        lines, dropped, queued = _ferry._log_take(1.0)
        for line in lines:
            try:
                _emit(line)
            except Exception:  # a failing handler must not end the reader
                pass
        if dropped > dropped_told:
            logging.getLogger("ferry").warning(
                "%d log lines dropped: they came faster than logging took them (ferry holds %d)",
                dropped - dropped_told, CAPACITY)
            dropped_told = dropped
        if (not queued and not lines) or generation != _generation:
            return


def _emit(line: Tuple[str, str, int, float, str, str, str]) -> None:
    level, subsystem, engine_id, created, thread, message, text = line
    logger = logging.getLogger("ferry." + subsystem if subsystem else "ferry")
    if not logger.hasHandlers():
        _print(text)
        return
    pylevel = _LEVELS.get(level, logging.WARNING)
    if not logger.isEnabledFor(pylevel):
        return
    record = logger.makeRecord(logger.name, pylevel, "(ferry)", 0, message, None, None,
                               extra={"ferry_engine": engine_id or None})
    record.created = created
    record.msecs = int((created - int(created)) * 1000) + 0.0
    record.relativeCreated = (created - getattr(logging, "_startTime", created)) * 1000
    if thread:
        record.threadName = thread
    logger.handle(record)


def _print(text: str) -> None:
    stream = sys.stderr
    if stream is None:
        os.write(2, (text + "\n").encode("utf-8", "backslashreplace"))
        return
    stream.write(text + "\n")
    stream.flush()


def _after_fork_in_child() -> None:
    # The child has no reader (C++ sends its lines to stderr until one
    # starts); the next Engine or Directory made in it starts one.
    global _lock, _thread
    _lock = threading.Lock()
    _thread = None


os.register_at_fork(after_in_child=_after_fork_in_child)
