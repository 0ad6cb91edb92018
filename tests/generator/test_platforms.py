"""vLLM behind a platform that renames its series (Ray Serve LLM) or adds labels (KServe), from the
real 0.32.0 capture rewritten by scripts/build_platform_expositions.py: each bundle is as complete as
the plain server's, queries the platform's names, keeps its identity labels and passes promtool."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from vllm_obs.cli import main as vllm_obs

from tests.generator.test_bad_input import run_failing
from tests.generator.test_rules import check_and_test
from tests.support.bundles import ANOTHER_RELEASE, generate, rule_exprs
from tests.support.rule_slices import promtool_each_file_on_its_slice
from tests.support.tiers import tiered

pytestmark = pytest.mark.prometheus

METRICS = Path(__file__).parent.parent / "fixtures" / "metrics"
PLAIN = METRICS / "vllm-0.32.0-cpu-traffic.prom"
PLATFORMS = {
    "ray": ("Ray Serve LLM", METRICS / "platforms" / "vllm-0.32.0-cpu-traffic-ray.prom"),
    "ray-colon": ("Ray Serve LLM", METRICS / "platforms" / "vllm-0.32.0-cpu-traffic-ray-colon.prom"),
    "kserve": ("KServe", METRICS / "platforms" / "vllm-0.32.0-cpu-traffic-kserve.prom"),
    "kserve-llmisvc": (
        "KServe LLMInferenceService",
        METRICS / "platforms" / "vllm-0.32.0-cpu-traffic-kserve-llmisvc.prom",
    ),
}


def alerts(bundle: Path) -> set[tuple[str, str, str]]:
    """(alert, severity, source label) of every alert rule."""
    out = set()
    for group in yaml.safe_load((bundle / "alerts" / "vllm-alerts.rules.yml").read_text())["groups"]:
        for rule in group["rules"]:
            labels = rule["labels"]
            out.add((rule["alert"], labels["severity"], labels.get("source", "")))
    return out


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    return generate(tmp_path_factory.mktemp("plain") / "bundle", "--metrics-file", str(PLAIN))


# `make test` runs Ray Serve's generated tests (its names differ most); the full matrix every one's.
IN_MAKE_TEST = ("ray",)


@pytest.mark.parametrize("key", tiered(sorted(PLATFORMS), IN_MAKE_TEST))
def test_a_platform_bundle_is_complete_and_passes_its_promtool_tests(key, plain, tmp_path):
    title, fixture = PLATFORMS[key]
    bundle = generate(tmp_path / "bundle", "--metrics-file", str(fixture))
    manifest = (bundle / ".vllm-obs-manifest.json").read_text()
    assert f"({title}, engine v1, looks like vLLM 0.32.0 to 0.34.0)" in manifest
    expected = alerts(plain)
    if key.startswith("ray"):
        # Requests reach vLLM through Ray Serve's ingress: there is no http_requests_total.
        expected = {a for a in expected if a[2] != "http"}
    assert alerts(bundle) == expected
    check_and_test(bundle, **ANOTHER_RELEASE)


@pytest.mark.parametrize("key", ["ray", "ray-colon"])
def test_ray_bundles_query_ray_names_and_keep_the_replica(key, tmp_path):
    bundle = generate(tmp_path / "bundle", "--metrics-file", str(PLATFORMS[key][1]))
    prefix = "ray_vllm:" if key == "ray-colon" else "ray_vllm_"
    exprs = rule_exprs(bundle)
    vllm_names = {n for e in exprs.values() for n in re.findall(r"\b(?:ray_)?vllm[:_][a-z_:]+", e)}
    own = {n for n in vllm_names if not n.startswith(("vllm_log_", "vllm_probe_", "vllm_"))}
    assert own and all(n.startswith(prefix) for n in own), sorted(own)[:5]
    quantile = next(
        e
        for k, e in exprs.items()
        if k.endswith("job_instance_model:vllm_time_to_first_token_seconds:p95_5m")
    )
    assert "by (job, instance, ReplicaId, model_name, le)" in quantile
    text = (bundle / "alerts" / "vllm-alerts.rules.yml").read_text()
    assert "(ReplicaId {{ $labels.ReplicaId }})" in text


def test_kserve_bundle_is_the_plain_one_with_the_platform_named(plain, tmp_path):
    bundle = generate(tmp_path / "bundle", "--metrics-file", str(PLATFORMS["kserve"][1]))
    assert rule_exprs(bundle) == rule_exprs(plain)


def test_an_llm_inference_service_is_counted_once_with_its_labels(tmp_path, capsys):
    """KServe's PodMonitor copy (kserve_*, llm_isvc_* labels) beside a plain scrape of the same
    engine: the bundle reads the copy only, so no engine counts twice, and keeps its labels."""
    fixture = PLATFORMS["kserve-llmisvc"][1]
    assert vllm_obs(["generate", "--out", str(tmp_path / "bundle"), "--metrics-file", str(fixture)]) == 0
    assert (
        "scrapes the servers itself, under the job <namespace>/kserve-llm-isvc-vllm-engine"
        in capsys.readouterr().err
    )
    exprs = rule_exprs(tmp_path / "bundle")
    served = {
        n
        for e in exprs.values()
        for n in re.findall(r"\b[a-z_]*(?:vllm:[a-z_]+|http_requests_total|process_[a-z_]+)", e)
    }
    assert served and all(n.startswith("kserve_") for n in served), sorted(
        n for n in served if not n.startswith("kserve_")
    )
    quantile = next(
        e
        for k, e in exprs.items()
        if k.endswith("job_instance_model:vllm_time_to_first_token_seconds:p95_5m")
    )
    assert "by (job, instance, llm_isvc_name, llm_isvc_role, llm_isvc_component, model_name, le)" in quantile
    # Told to select KServe's job, the bundle does and says nothing more.
    config = {"prometheus": {"vllm_job": "team-a/kserve-llm-isvc-vllm-engine"}}
    generate(tmp_path / "selected", "--metrics-file", str(fixture), config=config)
    assert "vllm_job" not in capsys.readouterr().err
    assert any(
        'job="team-a/kserve-llm-isvc-vllm-engine"' in e for e in rule_exprs(tmp_path / "selected").values()
    )


def test_an_unknown_renaming_is_refused_naming_what_was_found(capsys, tmp_path):
    existing = tmp_path / "existing"
    existing.mkdir()
    saved = tmp_path / "renamed.prom"
    saved.write_text(
        "# TYPE acme_vllm_num_requests_running gauge\nacme_vllm_num_requests_running 1\n"
        "# TYPE acme_vllm_prompt_tokens_total counter\nacme_vllm_prompt_tokens_total 5\n"
    )
    line = run_failing(capsys, existing, "--metrics-file", str(saved))
    assert "acme_vllm_num_requests_running" in line and "Ray Serve LLM" in line


def test_dropping_the_replica_label_fails_the_ray_bundle_s_tests(tmp_path):
    """Two Serve replicas share a Ray node's metrics port: without ReplicaId they merge."""
    bundle = generate(tmp_path / "bundle", "--metrics-file", str(PLATFORMS["ray"][1]))
    for path in (bundle / "alerts").glob("*.rules.yml"):
        text = path.read_text()
        path.write_text(text.replace("instance, ReplicaId, ", "instance, "))
    assert promtool_each_file_on_its_slice(bundle, first_failure=True)
