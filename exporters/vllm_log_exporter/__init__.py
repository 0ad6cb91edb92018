"""vllm-log-exporter: turns vLLM's logs into Prometheus metrics for the failures its /metrics cannot
report (OOM, dead engine, failed start) and for its lifecycle (a loading server has no /metrics yet).
Run it as `vllm-log-exporter` (cli.py); exporters/README.md names each module's job.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
