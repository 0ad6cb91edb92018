"""vllm-log-exporter: turns vLLM's logs into Prometheus metrics for failures it cannot
report on its own /metrics (OOM, dead engine, failed startup).

Run it as `vllm-log-exporter` (cli.py); the modules are small and named for their job:
patterns (patterns.yaml), lines, records, scanner, events, counts, pipeline, tailer,
state, metrics.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
