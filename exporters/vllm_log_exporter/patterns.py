"""Load and check patterns.yaml, the regexes that turn vLLM log lines into events. Loading fails
fast (PatternError) on an unknown kind or reason, a bad regex, or a sample its regex or anchor does
not match; event and reason names are checked against the exporters' contract on import.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from .contract import closed_values
from .lines import clean_line
from .records import ACCESS_LINE, is_matchable, parse_line

# The events and startup-failure reasons the event rules count by name (events.py).
OOM, ENGINE_DEAD, STARTUP_FAILED, PREEMPTION = "oom", "engine_dead", "startup_failed", "preemption"
REQUEST_ERROR, STARTUP_COMPLETE, SHUTDOWN = "request_error", "startup_complete", "shutdown"
STARTUP_BEGIN = "startup_begin"
ENGINE_FAULTED, REQUEST_REFUSED = "engine_faulted", "request_refused"
OUT_OF_MEMORY, ENGINE_INIT_FAILED, OTHER = "out_of_memory", "engine_init_failed", "other"
GPU_FAULT = "gpu_fault"

EVENTS = closed_values(
    "event",
    "vllm_log_events",
    "vllm_log_last_event_timestamp_seconds",
    named=(
        OOM,
        ENGINE_DEAD,
        STARTUP_FAILED,
        PREEMPTION,
        REQUEST_ERROR,
        STARTUP_COMPLETE,
        SHUTDOWN,
        STARTUP_BEGIN,
        ENGINE_FAULTED,
        REQUEST_REFUSED,
    ),
)
"""Values of the `event` label (the exporters' contract), in exposition order. All are
exported from the start."""

REASONS = closed_values(
    "reason", "vllm_log_startup_failures", named=(OUT_OF_MEMORY, ENGINE_INIT_FAILED, OTHER)
)
"""Values of the startup-failure `reason` label (the exporters' contract): the `reason`
field of patterns.yaml must be one of them."""

DEATH_REASONS = closed_values("reason", "vllm_log_engine_deaths", named=(OUT_OF_MEMORY, GPU_FAULT, OTHER))
"""Values of the engine-death `reason` label (the exporters' contract): the `reason` field
of an engine_dead entry must be one of them; `other` is generic."""

GENERIC_REASONS = frozenset({ENGINE_INIT_FAILED, OTHER})
"""Reasons that say only that a startup failed: a more specific reason seen for the same
incident replaces them (events.py)."""

KINDS = frozenset(
    {
        "ignore",
        "oom",
        "engine_dead",
        "engine_exception",
        "gpu_fault",
        "frame",
        "startup_failed",
        "startup_begin",
        "engine_begin",
        "loading",
        "startup_duration",
        "startup_complete",
        "shutdown",
        "shutdown_complete",
        "request_error",
        "http_access",
        "preemption_total",
        "stats",
        "engine_faulted",
        "engine_recovered",
        "faulted_rejection",
        "survived",
    }
)

# Groups a kind's regex must define, so the event rules can rely on them.
_REQUIRED_GROUPS = {
    "http_access": {"path", "status"},
    "preemption_total": {"total"},
    "stats": {"prompt", "generation", "running", "waiting", "kv_percent"},
    "startup_duration": {"seconds"},
}
# Kinds whose regex may define a `version` group (the vLLM version the line announces).
_VERSION_KINDS = frozenset({"startup_begin", "engine_begin"})
# Kinds whose regex may define a `fault_tolerance` group (the arguments turn it on).
_FAULT_TOLERANCE_KINDS = frozenset({"startup_begin"})

FRAME_CONTEXTS = ("serving", "starting")
"""What a traceback frame tells (its `context` field): `serving`, the engine's loop raised
(the engine ended); `starting`, the failure happened on the way up (the server never came up)."""

DURATION_SOURCES = ("weights", "model_load", "engine_init")
"""What a startup_duration line measures (its `phase` field): `weights` and `model_load`
both give the weights phase (model_load only when no weights line was seen)."""

STATS_ANCHOR = "Avg prompt throughput: "
"""Every stats line holds this; the scanner treats those lines separately."""


class PatternError(ValueError):
    """patterns.yaml (or a --patterns file) is invalid; the message names the entry."""


@dataclass(frozen=True)
class Pattern:
    name: str
    kind: str
    anchor: str
    regex: re.Pattern[str]
    sample: str
    reason: str | None = None
    phase: str | None = None
    context: str | None = None
    versions: str = ""
    source: str = ""


@dataclass(frozen=True)
class PatternSet:
    patterns: tuple[Pattern, ...]

    def __post_init__(self) -> None:
        # Access lines carry request-controlled text (the path): only access patterns
        # may look at them, so a request for `/torch.OutOfMemoryError` is not an OOM.
        access = tuple(p for p in self.patterns if p.kind == "http_access")
        object.__setattr__(self, "_access", access)
        # Traceback frames are indented: only frame patterns may look at indented text.
        frames = tuple(p for p in self.patterns if p.kind == "frame")
        object.__setattr__(self, "_frames", frames)

    @property
    def anchors(self) -> tuple[str, ...]:
        """Distinct anchors of the patterns that can count something, in file order."""
        return tuple(dict.fromkeys(p.anchor for p in self.patterns if p.kind != "ignore"))

    @property
    def stats(self) -> tuple[Pattern, ...]:
        return tuple(p for p in self.patterns if p.kind == "stats")

    def match(self, message: str) -> tuple[Pattern, re.Match[str]] | None:
        """The first pattern (file order) whose anchor and regex both occur in message. Indented
        messages (traceback frames, quoted source) match only frame patterns; an `ignore` match
        returns None."""
        if not message:
            return None
        if not is_matchable(message):
            candidates = self._frames  # type: ignore[attr-defined]
        elif ACCESS_LINE.match(message):
            candidates = self._access  # type: ignore[attr-defined]
        else:
            candidates = self.patterns
        for pattern in candidates:
            if pattern.anchor in message:
                found = pattern.regex.search(message)
                if found:
                    return None if pattern.kind == "ignore" else (pattern, found)
        return None

    def match_line(self, line: str) -> tuple[Pattern, re.Match[str]] | None:
        """match() over the messages of one cleaned line (first hit wins)."""
        for message in parse_line(line).messages:
            hit = self.match(message)
            if hit:
                return hit
        return None

    def __iter__(self) -> Iterator[Pattern]:
        return iter(self.patterns)

    def __len__(self) -> int:
        return len(self.patterns)


def default_patterns_text() -> str:
    return resources.files(__package__).joinpath("patterns.yaml").read_text(encoding="utf-8")


def load_patterns(path: Path | None = None) -> PatternSet:
    """Parse and validate a patterns file (the packaged one by default)."""
    if path is None:
        text, origin = default_patterns_text(), "patterns.yaml"
    else:
        try:
            text, origin = path.read_text(encoding="utf-8"), str(path)
        except OSError as exc:
            raise PatternError(f"cannot read patterns file {path}: {exc.strerror}") from None
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise PatternError(f"{origin} is not valid YAML: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("patterns"), list):
        raise PatternError(f"{origin} must be a mapping with a 'patterns' list")
    return PatternSet(tuple(_parse_entries(document["patterns"], origin)))


def _parse_entries(entries: Sequence[object], origin: str) -> Iterator[Pattern]:
    seen: set[str] = set()
    allowed = {
        "name",
        "kind",
        "reason",
        "phase",
        "context",
        "anchor",
        "regex",
        "versions",
        "sample",
        "source",
    }
    for index, entry in enumerate(entries):
        where = f"{origin} entry {index + 1}"
        if not isinstance(entry, dict):
            raise PatternError(f"{where} is not a mapping")
        unknown = set(entry) - allowed
        if unknown:
            raise PatternError(f"{where} has unknown field(s): {', '.join(sorted(unknown))}")
        for field in ("name", "kind", "anchor", "regex", "sample"):
            if not isinstance(entry.get(field), str) or not entry[field]:
                raise PatternError(f"{where} needs a non-empty string '{field}'")
        name = entry["name"]
        where = f"{origin} pattern {name!r}"
        if name in seen:
            raise PatternError(f"{where} is defined twice")
        seen.add(name)
        kind, reason = entry["kind"], entry.get("reason")
        if kind not in KINDS:
            raise PatternError(f"{where} has unknown kind {kind!r}; known: {', '.join(sorted(KINDS))}")
        if kind == "startup_failed" and reason is None:
            raise PatternError(f"{where} is a startup failure without a 'reason'")
        known = DEATH_REASONS if kind == "engine_dead" else REASONS
        if reason is not None and reason not in known:
            raise PatternError(f"{where} has unknown reason {reason!r}; known: {', '.join(known)}")
        try:
            regex = re.compile(entry["regex"])
        except re.error as exc:
            raise PatternError(f"{where} has an invalid regex: {exc}") from None
        missing = _REQUIRED_GROUPS.get(kind, set()) - set(regex.groupindex)
        if missing:
            raise PatternError(f"{where} lacks named group(s) {', '.join(sorted(missing))}")
        if "version" in regex.groupindex and kind not in _VERSION_KINDS:
            raise PatternError(
                f"{where}: only {' and '.join(sorted(_VERSION_KINDS))} lines may have a 'version' group"
            )
        if "fault_tolerance" in regex.groupindex and kind not in _FAULT_TOLERANCE_KINDS:
            raise PatternError(f"{where}: only startup_begin lines may have a 'fault_tolerance' group")
        phase = entry.get("phase")
        if (kind == "startup_duration") != (phase is not None):
            raise PatternError(f"{where}: a 'phase' is needed by startup_duration entries and only by them")
        if phase is not None and phase not in DURATION_SOURCES:
            raise PatternError(f"{where} has unknown phase {phase!r}; known: {', '.join(DURATION_SOURCES)}")
        context = entry.get("context")
        if (kind == "frame") != (context is not None):
            raise PatternError(f"{where}: a 'context' is needed by frame entries and only by them")
        if context is not None and context not in FRAME_CONTEXTS:
            raise PatternError(f"{where} has unknown context {context!r}; known: {', '.join(FRAME_CONTEXTS)}")
        if kind == "frame" and not (regex.pattern.startswith("^") and regex.pattern.endswith("$")):
            raise PatternError(
                f"{where}: a frame regex must match the whole line (^...$), so text around it never matches"
            )
        if entry["anchor"] not in entry["sample"]:
            raise PatternError(f"{where}: the sample does not contain the anchor {entry['anchor']!r}")
        messages = parse_line(clean_line(entry["sample"].encode("utf-8"))).messages
        if not any((is_matchable(m) or kind == "frame") and regex.search(m) for m in messages):
            raise PatternError(f"{where}: the regex does not match its own sample's message")
        yield Pattern(
            name=name,
            kind=kind,
            anchor=entry["anchor"],
            regex=regex,
            sample=entry["sample"],
            reason=reason,
            phase=phase,
            context=context,
            versions=str(entry.get("versions", "")),
            source=str(entry.get("source", "")),
        )
