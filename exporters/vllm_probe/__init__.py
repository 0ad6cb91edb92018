"""vllm-probe: sends each vLLM a minimal real request and exports the outcome, so an engine
that hangs while /health still answers 200 becomes visible.

Run it as `vllm-probe` (cli.py) or `python -m vllm_probe`. Modules: contract (its families
and label values in the exporters' contract), targets (the --target values and their
labels), outcome (what counts as an answer, failure reasons), canary (one probe cycle
against one server), metrics (the collector), runner (the per-target workers and the
ticking schedule).
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
