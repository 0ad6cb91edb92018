"""vllm-probe: sends each vLLM a minimal real request and exports the outcome, so an engine that
hangs while /health still answers 200 becomes visible. Run it as `vllm-probe` (cli.py) or
`python -m vllm_probe`; exporters/vllm_probe/README.md describes it.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
