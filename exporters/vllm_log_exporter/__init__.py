"""vllm-log-exporter: turns vLLM's logs into Prometheus metrics for failures it cannot
report on its own /metrics (OOM, dead engine, failed startup) and for where the server is
in its lifecycle (a server loading its model has no /metrics yet).

Run it as `vllm-log-exporter` (cli.py); the modules are small and named for their job:
contract (its families and label values in the exporters' contract), patterns
(patterns.yaml), lines, records, scanner, events, lifecycle_labels, lifecycle, counts,
pipeline, tailer, state, metrics.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
