"""`vllm-obs doctor`: why a dashboard is empty or an alert cannot fire, on the live stack.
Everything it checks comes from the bundle on disk and the catalog (renamed and feature-only
series); nothing names a metric in code.
"""
