"""JSON logs: one object per line; the message is a fixed phrase, variables are fields."""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import Final

#: The levels MNNVL_LOG_LEVEL accepts, most verbose first.
LEVELS: Final = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

# Attributes every LogRecord has; anything else on a record came in through `extra=` and is a field.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


# kopf attaches its settings and object references to records; they are noise in our logs.
_KOPF_EXTRAS = frozenset({"settings", "k8s_skip", "k8s_ref"})


class _QuietAdmissionDenials(logging.Filter):
    """kopf logs every rejected admission request as an error; a rejection is the webhook working."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.getMessage().startswith("Webhook '") and "failed permanently" in record.getMessage())


class JsonFormatter(logging.Formatter):
    def __init__(self, controller: str) -> None:
        super().__init__()
        self.controller = controller

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "controller": self.controller,
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update(
            {key: value for key, value in vars(record).items() if key not in _STANDARD and key not in _KOPF_EXTRAS}
        )
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure(controller: str, level: str = "INFO") -> None:
    """JSON lines on stderr at `level`, one of LEVELS (the settings have checked it)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter(controller))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # kopf reports every handled pod event at INFO; keep it for warnings and errors.
    logging.getLogger("kopf").setLevel(logging.WARNING)
    logging.getLogger("kopf.objects").addFilter(_QuietAdmissionDenials())
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
