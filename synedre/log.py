"""structlog configuration: console in a terminal, JSON in production."""
import logging
import sys

import structlog


class _Stderr:
    """Whatever `sys.stderr` is when a line is written, not when logging was configured: a
    test runner (or a daemonising parent) may swap it, and a closed stream must not break
    every later log call."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure(fmt: str = "console", level: str = "INFO") -> None:
    renderer = (
        structlog.processors.JSONRenderer()
        if fmt == "json"
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    logging.basicConfig(level=level, stream=sys.stderr, format="%(message)s")
    logging.getLogger("pgserver").setLevel(logging.WARNING)  # chatty at INFO
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso"),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level)),
        logger_factory=structlog.PrintLoggerFactory(_Stderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )


log = structlog.get_logger("synedre")
