"""docker-compose and Kubernetes files agree with the generated bundle, checked statically (no
Docker or cluster here): every mount exists, paths line up between services, the Kubernetes
objects carry exactly the bundle's rules and dashboards. Safety rules: test_stack_rules.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml
from vllm_obs.dashboards.render.provisioning import DASHBOARD_PATH

from stack.make_secrets import ALERTMANAGER_DIR

from .rules import k8s_jobs
from .stackfiles import k8s_documents

REPO = Path(__file__).parent.parent.parent
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
PROMETHEUS = yaml.safe_load((REPO / "prometheus" / "prometheus.yml").read_text())


def mounts(service: str) -> dict[str, str]:
    out = {}
    for volume in COMPOSE["services"][service].get("volumes", []):
        source, target = volume.split(":")[:2]
        out[target] = source
    return out


def test_the_stack_has_every_component():
    assert set(COMPOSE["services"]) == {
        "vllm",
        "vllm-log-exporter",
        "vllm-probe",
        "dcgm-exporter",
        "prometheus",
        "alertmanager",
        "grafana",
    }
    # NVIDIA's exporter only runs with `--profile gpu`; everything else always.
    assert {n for n, s in COMPOSE["services"].items() if s.get("profiles")} == {"dcgm-exporter"}
    assert COMPOSE["services"]["dcgm-exporter"]["profiles"] == ["gpu"]


def test_a_server_that_exits_0_after_its_engine_died_is_restarted():
    """vLLM exits with status 0 after an engine death (vLLM issue #48966): only a policy that
    restarts whatever the exit status brings it back (docs/operations.md, Restarts)."""
    policies = {name: service.get("restart") for name, service in COMPOSE["services"].items()}
    assert set(policies.values()) == {"unless-stopped"}, policies
    (deployment,) = [d for d in k8s_documents("vllm.yaml") if d.get("kind") == "Deployment"]
    assert deployment["spec"]["template"]["spec"].get("restartPolicy", "Always") == "Always"


def test_every_bind_mount_exists_in_the_checkout():
    made_by_make_secrets = f"./secrets/{ALERTMANAGER_DIR}"
    for name in COMPOSE["services"]:
        for source in mounts(name).values():
            if source.startswith("./") and source != made_by_make_secrets:
                assert (REPO / source).exists(), f"{name} mounts missing {source}"
    dockerfile = COMPOSE["services"]["vllm-log-exporter"]["build"]["dockerfile"]
    assert (REPO / dockerfile).exists()


def test_prometheus_finds_its_rules_through_the_mounts():
    command = COMPOSE["services"]["prometheus"]["command"]
    config = next(c.split("=", 1)[1] for c in command if c.startswith("--config.file="))
    config_dir = str(Path(config).parent)
    assert mounts("prometheus")[config_dir] == "./prometheus"
    for rule_file in PROMETHEUS["rule_files"]:
        mounted = Path(config_dir, rule_file).resolve()
        assert mounts("prometheus")[str(mounted.parent)] == "./alerts"
        assert (REPO / "alerts" / mounted.name).exists()


def test_the_exporter_reads_the_file_vllm_writes():
    entrypoint = COMPOSE["services"]["vllm"]["entrypoint"]
    assert "--log-file=/var/log/vllm/vllm.log" in entrypoint
    assert mounts("vllm")["/var/log/vllm"] == mounts("vllm-log-exporter")["/var/log/vllm"] == "vllm-logs"
    script = entrypoint[1]
    assert mounts("vllm")[script] == "./stack/vllm_entrypoint.py"
    dockerfile = (REPO / "exporters" / "Dockerfile").read_text()
    assert "/var/log/vllm/vllm.log" in dockerfile and "0.0.0.0:9400" in dockerfile
    # The Kubernetes example copies the same script out of the exporter image.
    assert "COPY stack/vllm_entrypoint.py /opt/vllm-obs/vllm_entrypoint.py" in dockerfile


def test_the_probe_runs_from_the_exporter_image():
    probe, exporter = COMPOSE["services"]["vllm-probe"], COMPOSE["services"]["vllm-log-exporter"]
    assert probe["image"] == exporter["image"] and probe["build"] == exporter["build"]
    assert probe["entrypoint"] == ["vllm-probe"]
    assert "--listen=0.0.0.0:9401" in probe["command"]


def test_grafana_and_alertmanager_paths_line_up():
    assert mounts("grafana")[DASHBOARD_PATH] == "./dashboards"
    assert mounts("grafana")["/etc/grafana/provisioning"] == "./grafana/provisioning"
    am = " ".join(COMPOSE["services"]["alertmanager"]["command"])
    assert "--config.file=/etc/vllm-obs/alerts/alertmanager.yml" in am
    secrets = yaml.safe_load((REPO / "alerts" / "alertmanager.yml").read_text())
    files = [
        c.get("routing_key_file") or c.get("api_url_file")
        for r in secrets["receivers"]
        for key in ("pagerduty_configs", "slack_configs")
        for c in r.get(key, [])
    ]
    assert files and all(f.startswith("/etc/alertmanager/secrets/") for f in files)
    # Only Alertmanager's own folder: it never sees the Grafana password or the vLLM key.
    assert mounts("alertmanager")["/etc/alertmanager/secrets"] == "./secrets/alertmanager"


def test_kubernetes_objects_carry_the_bundle():
    """The same rules and dashboards as the compose files; with pod labels kept (their own
    test, tests/generator/test_pod_labels.py, proves them equal to a pod-label bundle)."""
    rule = yaml.safe_load((REPO / "kubernetes" / "generated" / "prometheusrule.yaml").read_text())
    groups = []
    for name in ("vllm-recording.rules.yml", "vllm-alerts.rules.yml"):
        groups += yaml.safe_load((REPO / "alerts" / name).read_text())["groups"]
    assert rule["kind"] == "PrometheusRule"
    assert _names(rule["spec"]["groups"]) == _names(groups)
    config_map = yaml.safe_load((REPO / "kubernetes" / "generated" / "grafana-dashboards.yaml").read_text())
    assert sorted(config_map["data"]) == sorted(p.name for p in (REPO / "dashboards").glob("*.json"))
    for path in (REPO / "dashboards").glob("*.json"):
        ours, theirs = json.loads(config_map["data"][path.name]), json.loads(path.read_text())
        assert [p["title"] for p in ours["panels"]] == [p["title"] for p in theirs["panels"]]
    kustomization = yaml.safe_load((REPO / "kubernetes" / "kustomization.yaml").read_text())
    for resource in kustomization["resources"]:
        assert (REPO / "kubernetes" / resource).exists()


# With pod labels, a model's desired replicas come from kube-state-metrics too.
KUBERNETES_ONLY = {"job_model:vllm_replicas_desired:count"}


def _names(groups: list[dict]) -> list[tuple[str, list[str]]]:
    # Unique names: with pod labels VllmMetricsAbsent has one more scope (per namespace).
    names = [(g["name"], {r.get("alert") or r["record"] for r in g["rules"]}) for g in groups]
    return [(name, sorted(rules - KUBERNETES_ONLY)) for name, rules in names]


# The bundle's Prometheus scrapes itself and the Alertmanagers for the pipeline alerts; on
# Kubernetes the Prometheus Operator's stack scrapes them (kube-prometheus: prometheus-k8s,
# alertmanager-main, set as prometheus.prometheus_job and prometheus.alertmanager_job).
SELF_MONITORING = {"prometheus", "alertmanager"}


def test_kubernetes_job_labels_match_the_rules():
    generated = {job["job_name"] for job in PROMETHEUS["scrape_configs"]} - SELF_MONITORING
    for variant in ("monitors.yaml", "servicemonitors.yaml"):
        assert k8s_jobs(k8s_documents(variant)) == generated, variant


def test_the_monitors_keep_the_pod_labels_the_rules_aggregate_by():
    """The operator labels every target with namespace, pod and container; the Kubernetes rules
    keep namespace and pod, so no monitor may overwrite or drop them (the cluster comes from
    external_labels, outside these files)."""
    kept = {"namespace", "pod", "container"}
    for variant in ("monitors.yaml", "servicemonitors.yaml"):
        for doc in k8s_documents(variant):
            for endpoint in doc["spec"].get("podMetricsEndpoints", []) + doc["spec"].get("endpoints", []):
                for step in endpoint.get("relabelings", []) + endpoint.get("metricRelabelings", []):
                    assert step.get("targetLabel") not in kept, (variant, step)
                    if step.get("action") in ("labeldrop", "labelkeep"):
                        regex = re.compile(step["regex"])
                        dropped = {
                            k for k in kept if bool(regex.fullmatch(k)) == (step["action"] == "labeldrop")
                        }
                        assert not dropped, (variant, step)


def test_the_exporter_image_copies_what_pip_needs_to_build_the_project():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    copied = set()
    for line in (REPO / "exporters" / "Dockerfile").read_text().splitlines():
        if line.startswith("COPY "):
            copied |= set(line.split()[1:-1])
    assert project["project"]["readme"] in copied and "pyproject.toml" in copied
    for where in project["tool"]["setuptools"]["packages"]["find"]["where"]:
        assert where in copied, where
    ignored = (REPO / ".dockerignore").read_text().split()
    assert not copied & set(ignored)
