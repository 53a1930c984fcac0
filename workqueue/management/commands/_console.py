"""Console output for the long-running and cron commands on a site that configured no logging.

``runworker`` tells its operator what it does (its start line, a signal, a reconnect, the
``N processed`` summary) through INFO records on the ``workqueue`` and ``operations`` loggers.
A site whose ``LOGGING`` routes them somewhere gets them there, unchanged. A site that routes
them nowhere (Django's default: only the ``django`` logger has a handler) would see nothing,
so for the command's lifetime we attach a console handler of our own, at the level
``--verbosity`` asks for: 0 warnings and errors only, 1 info, 2 and more debug.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager

# The loggers the commands speak through: the queue's, and the operations app's (its runner
# runs inside runworker). Named, not imported: workqueue never imports operations.
LOGGERS = ("workqueue", "operations")

LEVELS = {0: logging.WARNING, 1: logging.INFO}


class CommandHandler(logging.Handler):
    """Write records to a command's stderr (an OutputWrapper), styled by level on a terminal."""

    def __init__(self, command, level: int):
        super().__init__(level)
        self.command = command
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)
            style = self.command.style
            if record.levelno >= logging.ERROR:
                style_func = style.ERROR
            elif record.levelno >= logging.WARNING:
                style_func = style.WARNING
            else:
                style_func = str
            self.command.stderr.write(message, style_func=style_func)
            self.command.stderr.flush()
        except Exception:
            self.handleError(record)


@contextmanager
def console_logging(command, verbosity: int):
    """Attach ``command``'s console handler to each logger in LOGGERS that has no handler."""
    level = LEVELS.get(verbosity, logging.DEBUG)
    attached: list[tuple[logging.Logger, logging.Handler, int]] = []
    for name in LOGGERS:
        logger = logging.getLogger(name)
        if logger.hasHandlers():
            continue  # the site routes it (its own handler, or the root logger's): no doubled lines
        console = CommandHandler(command, level)
        attached.append((logger, console, logger.level))
        logger.addHandler(console)
        logger.setLevel(level)
    try:
        yield
    finally:
        for logger, handler, previous in attached:
            logger.removeHandler(handler)
            logger.setLevel(previous)
