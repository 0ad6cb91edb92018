"""The panel that explains each alert, by title, on the dashboard its `dashboard` key names.

An alert's `dashboard_url` opens that panel full screen (`viewPanel`); panel ids come from
titles (links.panel_id), so a title here must match the panel's title exactly. The
dashboard tests check every alert of several bundles lands on a panel that exists.
Watchdog has none: it explains itself.
"""

from __future__ import annotations

ALERT_PANELS: dict[str, str] = {
    "VllmHighTimeToFirstToken": "Time to first token",
    "VllmHighTimePerOutputToken": "Inter-token latency",
    "VllmQueueDepthHigh": "Waiting vs running",
    "VllmSchedulerThrottled": "Waiting vs running",
    "VllmKVCachePressure": "KV-cache usage per engine",
    "VllmKVCacheFillingUp": "KV-cache usage per engine",
    "VllmPreemptions": "Preemptions per finished request",
    "VllmRequestErrors": "Error ratio",
    "VllmEngineStalled": "Requests in flight vs tokens generated",
    "VllmTargetDown": "Targets down",
    "VllmMetricsAbsent": "Engines reporting",
    "VllmEngineDead": "Engine deaths",
    "VllmOutOfMemory": "Out of memory",
    "VllmStartupFailed": "Failed starts",
    "VllmLogExporterDown": "Log exporter health",
    "VllmStartupSlow": "Server state",
    "VllmRestartLoop": "Server state",
    "VllmVersionDrift": "vLLM version (from the log)",
    "VllmEngineHung": "Canary probe success",
    "VllmProbeDown": "Canary probe failures by reason",
    "VllmTimeToFirstTokenBudgetBurn": "TTFT error-budget burn",
    "VllmTimePerOutputTokenBudgetBurn": "TPOT error-budget burn",
    "VllmSpecDecodeAcceptanceLow": "Draft acceptance rate per replica",
    "VllmRequestsRejected": "Requests rejected at admission",
    "VllmKVTransferFailures": "KV connector failures / s",
    "VllmEngineImbalance": "KV-cache usage spread across engines",
    "VllmGpuXidError": "XID errors",
    "VllmGpuMemoryNearlyFull": "Framebuffer used",
    "VllmGpuIdleWhileBusy": "GPU utilisation against running requests",
}
