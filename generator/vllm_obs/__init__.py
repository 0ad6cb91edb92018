"""vllm-obs: an observability and alerting bundle generator for the vLLM inference server."""

__version__ = "0.1.0"
