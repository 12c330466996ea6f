"""Log lines of the service as JSON objects, one per line on stderr.

Access lines carry their fields at the top level (``method``, ``path``, ``status``, ``ms``,
``key_id``, ``namespace``, ``client``); every line has ``time``, ``level``, ``logger`` and
``message``. Nothing here ever sees a key or a header: the access log is given the key's id.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            line.update(fields)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def log_config(level: str = "INFO", *, access: bool = True) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` for the server and every worker it starts."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": f"{__name__}.JsonFormatter"}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "json",
                "stream": "ext://sys.stderr",
            }
        },
        "loggers": {
            "contextstore.interfaces.service.access": {"level": "INFO" if access else "WARNING"},
            "uvicorn.access": {"level": "WARNING"},
        },
        "root": {"handlers": ["stderr"], "level": level},
    }
