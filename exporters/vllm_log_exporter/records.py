"""One cleaned log line to a Record: its log time and the message text(s) to match. It reads
vLLM's logger lines, uvicorn's, raw Python output and JSON records (shapes in docs/exporters.md);
headers are searched, not anchored, because docker, journald and k8s viewers prepend text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

# ERROR 11-29 09:56:15 [core.py:1510] EngineCore failed to start.
_VLLM_HEADER = re.compile(
    r"(?:\([^()]*? pid=\d+\)\s+)?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?P<month>\d\d)-(?P<day>\d\d) (?P<hour>\d\d):(?P<minute>\d\d):(?P<second>\d\d)(?:\.\d+)? "
    r"\[?[^\s\]]+:\d+\] ?"
)
# INFO:     127.0.0.1:44990 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error
_UVICORN_HEADER = re.compile(r"(?:^|\s)(?:\([^()]*? pid=\d+\)\s+)?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+")
# (EngineCore_DP0 pid=188) Process EngineCore_DP0:
_PROCESS_PREFIX = re.compile(r"(?:^|\s)\([^()]*? pid=\d+\) ")
# "  | " before a line: a CI or log viewer's gutter, kept when a log is copied from it.
_GUTTER = re.compile(r"^\s*\| (?=\S)")
# 2026-11-29 08:42:29,234 (JSON asctime)
_JSON_TIME = re.compile(r"\d{4}-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[,.](\d+))?")
# The request line of an access log entry: request-controlled text that must never be
# matched against failure patterns (a client could request `/torch.OutOfMemoryError`).
ACCESS_LINE = re.compile(r'^\S+ - "[A-Z]+ \S+ HTTP/[\d.]+" \d{3}\b')

# Days before each month in a leap year: log times carry no year, and only differences
# matter (dedup windows), so every time is placed in the same leap year.
_DAYS_BEFORE = (0, 0, 31, 60, 91, 121, 152, 182, 213, 244, 274, 305, 335)


@dataclass
class Record:
    log_time: float | None
    """Seconds since Jan 1 of an arbitrary leap year, from the line's own timestamp."""
    messages: list[str] = field(default_factory=list)
    """Texts to match: the message, plus every line of a JSON record's exc_info."""


def log_seconds(month: int, day: int, hour: int, minute: int, second: float) -> float | None:
    if not (1 <= month <= 12 and 1 <= day <= 31):
        return None
    return ((_DAYS_BEFORE[month] + day - 1) * 24 + hour) * 3600 + minute * 60 + second


def parse_line(text: str) -> Record:
    """Split a cleaned line (see lines.clean_line) into log time and messages."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        record = _parse_json(stripped)
        if record is not None:
            return record
    header = _VLLM_HEADER.search(text)
    if header:
        g = header.groupdict()
        when = log_seconds(int(g["month"]), int(g["day"]), int(g["hour"]), int(g["minute"]), int(g["second"]))
        return Record(when, [text[header.end() :]])
    header = _UVICORN_HEADER.search(text)
    if header:
        return Record(None, [text[header.end() :]])
    prefix = _PROCESS_PREFIX.search(text)
    if prefix:
        return Record(None, [text[prefix.end() :]])
    gutter = _GUTTER.match(text)
    return Record(None, [text[gutter.end() :] if gutter else text])


def _parse_json(text: str) -> Record | None:
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    if not isinstance(obj, dict):
        return None
    messages = []
    message = obj.get("message", obj.get("msg"))
    if isinstance(message, str):
        messages.extend(message.split("\n"))
    for key in ("exc_info", "exc_text", "stack_info"):
        value = obj.get(key)
        if isinstance(value, str):
            messages.extend(value.split("\n"))
    when = None
    stamp = obj.get("asctime", obj.get("time", obj.get("timestamp")))
    if isinstance(stamp, str):
        found = _JSON_TIME.search(stamp)
        if found:
            month, day, hour, minute, second, fraction = found.groups()
            seconds = int(second) + (float("0." + fraction) if fraction else 0.0)
            when = log_seconds(int(month), int(day), int(hour), int(minute), seconds)
    return Record(when, messages)


def is_matchable(message: str) -> bool:
    """Traceback frames (indented by two spaces) and quoted source lines (by four or more)
    are never matched, nor tab-indented text. One leading space is text: the lines of vLLM's
    logo start with one."""
    return bool(message) and not message[:2].isspace() and message[0] != "\t"
