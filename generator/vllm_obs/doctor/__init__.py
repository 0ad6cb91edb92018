"""`vllm-obs doctor`: why a dashboard is empty or an alert cannot fire, on the live stack.

Everything it checks comes from the bundle on disk (scrape jobs, rule groups, every rule
and panel expression, receivers, the release it was built for) and the catalog (renamed
series, feature-only series); nothing names a metric in code.
"""
