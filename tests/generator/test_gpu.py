"""The GPU layer (gpu.enabled): catalog/dcgm.yaml agrees with dcgm-exporter; GPU bundles pass promtool
and their own tests (which fail on drift) and name only declared DCGM series; a real Prometheus
records GPU series carrying the vLLM instance under either join (DCGM pages: constructed fixtures)."""

from __future__ import annotations

import contextlib
import math
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from vllm_obs.cli import main as vllm_obs
from vllm_obs.dcgm import MIB, load_dcgm
from vllm_obs.rules.areas.gpu import GROUP as ALERT_GROUP
from vllm_obs.rules.areas.gpu import RECORDING_GROUP
from vllm_obs.vocabulary import GpuNames

from tests.generator.test_bundle_queries import CATALOG, catalog_names, unexposed
from tests.generator.test_rules import check_and_test, promtool
from tests.support.bundles import ANOTHER_RELEASE, aggregation_clauses, generate
from tests.support.exposed import exporter_series
from tests.support.monitoring import Prometheus
from tests.support.rule_slices import promtool_each_file_on_its_slice
from tests.support.stand_in import stand_in
from tests.support.tiers import tiered

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).parent.parent / "fixtures" / "metrics"
HOST_PAGE = FIXTURES / "dcgm-exporter-4.8.3-host.prom"
OPERATOR_PAGE = FIXTURES / "dcgm-exporter-gpu-operator.prom"
VLLM_PAGE = FIXTURES / "vllm-0.32.0-cpu-traffic.prom"
MULTI = {"multi_cluster": True, "cluster_label": "k8s_cluster"}
POD = {"enabled": True, "join": "pod", "job": "nvidia-dcgm-exporter", "exporters": []}
BUNDLES = {
    "instance": {"gpu": {"enabled": True}},
    "instance-multi-cluster": {"gpu": {"enabled": True}, "prometheus": MULTI},
    "pod": {"gpu": POD},
    "pod-multi-cluster": {"gpu": POD, "prometheus": MULTI},
    "max-num-seqs": {"gpu": {"enabled": True}, "alerts": {"max_num_seqs": 256}},
    "custom": {
        "gpu": {
            "enabled": True,
            "job": "gpus",
            "memory_full_threshold": 0.9,
            "memory_full_for": "3m",
            "idle_utilization_below": 0.25,
            "idle_for": "7m",
            "xid_window": "20m",
        },
        "alerts": {"max_num_seqs": 64},
        "prometheus": {"vllm_job": "inference", "extra_selector": 'namespace="serving"'},
    },
}
RECORDINGS = {
    GpuNames.utilization,
    GpuNames.memory_used_ratio,
    GpuNames.memory_used_bytes,
    GpuNames.memory_free_bytes,
    GpuNames.temperature,
    GpuNames.power,
    GpuNames.xid,
    GpuNames.server_utilization,
    GpuNames.server_memory_used,
}


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("gpu")
    return {name: generate(root / name, config=config) for name, config in BUNDLES.items()}


def groups(bundle: Path, file: str) -> dict[str, list[dict]]:
    doc = yaml.safe_load((bundle / "alerts" / file).read_text())
    return {g["name"]: g["rules"] for g in doc["groups"]}


def page_families(path: Path) -> dict:
    return {f.name: f for f in text_string_to_metric_families(path.read_text())}


# -- the data file -----------------------------------------------------------------------------


def test_every_source_names_a_repository_file_and_commit():
    dcgm = load_dcgm()
    assert dcgm.sources
    for name, source in dcgm.sources.items():
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", source["repository"]), name
        assert source["file"], name
        assert re.fullmatch(r"[0-9a-f]{40}", source["commit"]), name


def test_the_declared_series_are_on_dcgm_exporters_pages_with_their_types():
    """The host page has FB_RESERVED (4.8.3's default file); the GPU operator page's file has not."""
    host, operator = page_families(HOST_PAGE), page_families(OPERATOR_PAGE)
    for series in load_dcgm().series.values():
        assert host[series.name].type == series.type, series.name
        if series.optional:
            assert series.name not in operator
        else:
            assert operator[series.name].type == series.type, series.name
    assert [s.name for s in load_dcgm().series.values() if s.optional] == ["DCGM_FI_DEV_FB_RESERVED"]


def test_the_fixtures_carry_dcgm_exporters_labels():
    for path in (HOST_PAGE, OPERATOR_PAGE):
        text = path.read_text()
        assert text.startswith("# CONSTRUCTED, not captured")
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                assert {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"} <= set(sample.labels)
    xid = page_families(OPERATOR_PAGE)["DCGM_FI_DEV_XID_ERRORS"].samples
    assert {(s.labels["gpu"], s.labels.get("pod"), s.labels["err_code"], s.value) for s in xid} == {
        ("0", "vllm-0-7d9f8c6b5-abcde", "0", 0),
        ("1", "vllm-0-7d9f8c6b5-abcde", "0", 0),
        ("2", None, "79", 79),
    }


def test_critical_xids_are_the_hardware_and_bus_faults():
    dcgm = load_dcgm()
    critical = {x.code for x in dcgm.critical}
    assert {48, 79, 95} <= critical
    assert not critical & {x.code for x in dcgm.application}
    assert len(critical) == len(dcgm.critical)
    assert all(x.why for x in dcgm.critical)


# -- what a bundle holds ---------------------------------------------------------------------


def test_the_layer_is_off_by_default_and_off_leaves_the_bundle_alone(tmp_path):
    default = generate(tmp_path / "default")
    off = generate(tmp_path / "off", config={"gpu": {"enabled": False, "join": "pod", "job": "x"}})
    files = sorted(p.relative_to(default) for p in default.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(off) for p in off.rglob("*") if p.is_file())
    for name in files:
        assert (default / name).read_bytes() == (off / name).read_bytes(), name
    text = "".join(
        (default / "alerts" / f).read_text() for f in ("vllm-recording.rules.yml", "vllm-alerts.rules.yml")
    )
    assert "DCGM_" not in text and "vllm_gpu" not in text
    assert "dcgm" not in (default / "prometheus" / "prometheus.yml").read_text()
    assert "VllmGpu" not in (default / "alerts" / "alertmanager.yml").read_text()
    assert not (default / "tests" / "rules" / "gpu.test.yml").exists()


def test_the_recording_rules_have_the_names_dashboards_use(bundles):
    for name in ("instance", "pod-multi-cluster"):
        rules = groups(bundles[name], "vllm-recording.rules.yml")[RECORDING_GROUP]
        assert {r["record"] for r in rules} == RECORDINGS
    alerts = groups(bundles["instance"], "vllm-alerts.rules.yml")[ALERT_GROUP]
    assert sorted({r["alert"] for r in alerts}) == [
        "VllmGpuIdleWhileBusy",
        "VllmGpuMemoryNearlyFull",
        "VllmGpuXidError",
    ]


@pytest.mark.prometheus
def test_the_group_names_stay_unique_in_the_merged_prometheusrule(bundles, tmp_path):
    """The PrometheusRule carries both rule files; Prometheus refuses a group name twice in one file."""
    for name, bundle in bundles.items():
        doc = yaml.safe_load((bundle / "kubernetes" / "generated" / "prometheusrule.yaml").read_text())
        names = [g["name"] for g in doc["spec"]["groups"]]
        assert len(names) == len(set(names)) and RECORDING_GROUP in names and ALERT_GROUP in names
        merged = tmp_path / f"{name}.rules.yml"
        merged.write_text(yaml.safe_dump({"groups": doc["spec"]["groups"]}))
        checked = promtool("check", "rules", str(merged), cwd=tmp_path)
        assert checked.returncode == 0, checked.stdout + checked.stderr


def test_per_gpu_rules_keep_the_server_the_gpu_and_the_cluster(bundles):
    for name, keep in (
        ("instance", "instance, gpu, UUID, modelName"),
        ("pod-multi-cluster", "k8s_cluster, instance, gpu, UUID, modelName"),
    ):
        rules = {
            r["record"]: r["expr"] for r in groups(bundles[name], "vllm-recording.rules.yml")[RECORDING_GROUP]
        }
        for record, expr in rules.items():
            if record.startswith("instance_gpu:") and record != GpuNames.memory_used_ratio:
                assert expr.startswith(f"max by ({keep}) ("), (name, record)
        server = keep.removesuffix(", gpu, UUID, modelName")
        assert rules[GpuNames.server_utilization] == f"avg by ({server}) ({GpuNames.utilization})"
    for where, labels in aggregation_clauses(bundles["pod-multi-cluster"]):
        assert "k8s_cluster" in labels, (where, labels)


def test_the_scrape_job_of_each_join(bundles, tmp_path, capsys):
    jobs = {
        j["job_name"]: j
        for j in yaml.safe_load((bundles["instance"] / "prometheus" / "prometheus.yml").read_text())[
            "scrape_configs"
        ]
    }
    dcgm = jobs["dcgm-exporter"]
    assert dcgm["static_configs"] == [
        {"targets": ["dcgm-exporter:9400"], "labels": {"__vllm_instance": "vllm:8000"}}
    ]
    assert {"source_labels": ["__vllm_instance"], "target_label": "instance"} in dcgm["relabel_configs"]
    pod = yaml.safe_load((bundles["pod"] / "prometheus" / "prometheus.yml").read_text())
    assert "nvidia-dcgm-exporter" not in {j["job_name"] for j in pod["scrape_configs"]}
    # join: pod with the compose-style exporter list left in: said, not silently dropped.
    capsys.readouterr()
    config = tmp_path / "pod.yml"
    config.write_text(yaml.safe_dump({"gpu": {"enabled": True, "join": "pod"}}))
    assert vllm_obs(["generate", "--out", str(tmp_path / "b"), "--config", str(config)]) == 0
    assert "gpu.join is pod, so gpu.exporters (dcgm-exporter:9400) is not scraped" in capsys.readouterr().err


def test_the_runbook_documents_both_joins_and_the_critical_codes(bundles):
    text = (bundles["pod"] / "alerts" / "runbooks.md").read_text()
    for name in ("VllmGpuXidError", "VllmGpuMemoryNearlyFull", "VllmGpuIdleWhileBusy"):
        assert f"\n## {name}\n" in text
    assert "`gpu.join: instance`" in text and "`exported_namespace`/`exported_pod`" in text
    assert "79 (GPU has fallen off the bus)" in text and "48 (Double Bit ECC Error)" in text


# -- queries name only declared series ---------------------------------------------------------


@pytest.fixture(scope="module")
def exporter(tmp_path_factory) -> set[str]:
    return exporter_series(tmp_path_factory.mktemp("exporter"))


def default_release_names() -> set[str]:
    """The vLLM series of the catalog's default release, which the bundles here are built for."""
    return catalog_names(CATALOG.newest.version, CATALOG.newest.engines[0])


def gpu_problems(problems: dict[str, set[str]]) -> dict[str, set[str]]:
    """The problems of the GPU layer's own rules, and any DCGM series anywhere (panels included);
    the rest of the bundle is test_bundle_queries.py's."""
    return {
        where: names
        for where, names in problems.items()
        if f":{RECORDING_GROUP}:" in where
        or f":{ALERT_GROUP}:" in where
        or any(n.startswith("DCGM_") for n in names)
    }


def test_gpu_bundles_query_only_declared_dcgm_series(bundles, exporter):
    declared = frozenset(load_dcgm().series)
    for name, bundle in bundles.items():
        assert gpu_problems(unexposed(bundle, default_release_names(), exporter, declared)) == {}, name


def test_the_check_catches_an_undeclared_dcgm_series(bundles, exporter, tmp_path):
    """A check that cannot fail proves nothing: DCGM_FI_DEV_FB_TOTAL is on no shipped page."""
    bundle = bundles["instance"]
    vllm = default_release_names()
    declared = frozenset(load_dcgm().series)
    # Without the data file's names a GPU bundle is flagged: no other source admits them.
    flagged = set().union(*gpu_problems(unexposed(bundle, vllm, exporter)).values())
    assert "DCGM_FI_DEV_XID_ERRORS" in flagged and "DCGM_FI_DEV_FB_RESERVED" in flagged
    copy = tmp_path / "bundle"
    copy.mkdir()
    (copy / "alerts").mkdir()
    for path in (bundle / "alerts").glob("*.rules.yml"):
        (copy / "alerts" / path.name).write_text(
            path.read_text().replace("DCGM_FI_DEV_FB_RESERVED", "DCGM_FI_DEV_FB_TOTAL")
        )
    (copy / "dashboards").mkdir()
    problems = gpu_problems(unexposed(copy, vllm, exporter, declared))
    assert set().union(*problems.values()) == {"DCGM_FI_DEV_FB_TOTAL"}
    assert all(f":{RECORDING_GROUP}:" in where for where in problems)


# -- promtool ------------------------------------------------------------------------------------


# `make test` runs pod-multi-cluster's whole suite (GPU, pod join and cluster together) and
# custom's GPU tests; the full matrix runs every bundle's.
IN_MAKE_TEST = ("pod-multi-cluster", "custom")


@pytest.mark.prometheus
@pytest.mark.parametrize("name", tiered(BUNDLES, IN_MAKE_TEST))
def test_gpu_bundles_pass_promtool_and_their_generated_tests(bundles, name):
    bundle = bundles[name]
    if name in ("instance", "instance-multi-cluster", "pod", "pod-multi-cluster", "max-num-seqs"):
        # every rule file, the config and every generated test (max_num_seqs is the scheduler's
        # too); the SLO burn's slow tiers as another release's: the GPU layer adds no burn rule,
        # and test_multi_cluster.py runs them whole with the cluster label.
        check_and_test(bundle, **ANOTHER_RELEASE)
    else:
        # These settings change only the GPU rules: their checks and the GPU tests suffice.
        rules = sorted(str(p.relative_to(bundle)) for p in (bundle / "alerts").glob("*.rules.yml"))
        for args in (
            ("check", "rules", *rules),
            ("check", "config", "prometheus/prometheus.yml"),
            ("test", "rules", "tests/rules/gpu.test.yml"),
        ):
            result = promtool(*args, cwd=bundle)
            assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    tests = yaml.safe_load((bundle / "tests" / "rules" / "gpu.test.yml").read_text())
    checks: dict[str, list] = {}
    for test in tests["tests"]:
        for check in test["alert_rule_test"]:
            checks.setdefault(check["alertname"], []).append(check["exp_alerts"])
    for alert in ("VllmGpuXidError", "VllmGpuMemoryNearlyFull", "VllmGpuIdleWhileBusy"):
        assert any(checks[alert]) and any(not e for e in checks[alert]), alert


# (bundle, rule file, before, after): each edit of a GPU rule must fail the generated tests.
MUTATIONS = [
    ("instance", "alerts", "memory_used:ratio > 0.97", "memory_used:ratio > 0.99"),  # memory threshold
    (
        "instance",
        "alerts",
        "memory_used:ratio > 0.97",
        "memory_used:ratio >= 0.97",
    ),  # the silent case sits on it
    ("instance", "alerts", "for: 5m", "for: 4m"),  # VllmGpuMemoryNearlyFull's `for`
    ("instance", "alerts", "[10m]) > 0", "[15m]) > 0"),  # XID window
    ("instance", "alerts", "\n        or instance_gpu:vllm_gpu_xid:last == 79", ""),  # 79 no longer pages
    (
        "instance",
        "alerts",
        ")\n      and\n      changes(",
        ")\n      or\n      changes(",
    ),  # an old code pages
    (
        "instance",
        "alerts",
        "> 0\n      unless\n",
        "> 0\n      and\n",
    ),  # warning tier loses the critical codes
    ("instance", "alerts", "utilization:avg < 0.1", "utilization:avg <= 0.1"),  # idle threshold
    ("instance", "alerts", "for: 10m", "for: 11m"),  # VllmGpuIdleWhileBusy's `for`
    ("instance", "alerts", ">= max_over_time(", "> max_over_time("),  # running at its peak
    ("instance", "alerts", "[1h])", "[5m])"),  # the peak's window
    ("max-num-seqs", "alerts", "sum >= 256", "sum > 256"),  # every slot taken
    ("instance", "recording", ") / 100", ") / 10"),  # percent to ratio
    ("instance", "recording", "  or\n          0 * ", "  and\n          0 * "),  # no FB_RESERVED fallback
    (
        "instance",
        "recording",
        "DCGM_FI_DEV_FB_RESERVED{",
        "DCGM_FI_DEV_FB_RESERVED_GONE{",
    ),  # reserved ignored
    ("pod", "recording", '"exported_pod", "(.+)"', '"exported_pod_name", "(.+)"'),  # ServiceMonitor's labels
    ("pod", "recording", "group_left (instance)", "group_left ()"),  # the vLLM instance not taken
    ("pod-multi-cluster", "recording", "on (k8s_cluster, namespace, pod)", "on (namespace, pod)"),
    ("pod-multi-cluster", "alerts", "and on (k8s_cluster, instance)", "and on (instance)"),
]


@pytest.mark.prometheus
@pytest.mark.parametrize("name, file, before, after", MUTATIONS, ids=[f"{m[0]}:{m[2]!r}" for m in MUTATIONS])
def test_the_generated_tests_fail_when_a_gpu_rule_drifts(bundles, name, file, before, after, tmp_path):
    source = bundles[name]
    copy = tmp_path / "bundle"
    for sub in ("alerts", "tests/rules"):
        (copy / sub).mkdir(parents=True)
    for path in (source / "alerts").glob("*.rules.yml"):
        (copy / "alerts" / path.name).write_text(path.read_text())
    (copy / "tests" / "rules" / "gpu.test.yml").write_text(
        (source / "tests" / "rules" / "gpu.test.yml").read_text()
    )
    path = copy / "alerts" / f"vllm-{file}.rules.yml"
    text = path.read_text()
    # Edit the GPU group only: the same text may appear in other groups.
    marker = f"- name: {ALERT_GROUP if file == 'alerts' else RECORDING_GROUP}\n"
    head, group = text.split(marker)
    group = group.split("\n- name: ")[0]
    assert before in group, (before, group)
    path.write_text(head + marker + text.split(marker)[1].replace(before, after, 1))
    failures = promtool_each_file_on_its_slice(copy, only=("gpu.test.yml",), first_failure=True)
    assert failures, f"promtool still passes after {before!r} -> {after!r}"


@pytest.mark.prometheus
def test_the_unmutated_copy_passes(bundles, tmp_path):
    """The mutation test's copy of a bundle passes as it is: its failures come from the edits."""
    for name in {m[0] for m in MUTATIONS}:
        copy = tmp_path / name
        for sub in ("alerts", "tests/rules"):
            (copy / sub).mkdir(parents=True)
        for path in (bundles[name] / "alerts").glob("*.rules.yml"):
            (copy / "alerts" / path.name).write_text(path.read_text())
        (copy / "tests" / "rules" / "gpu.test.yml").write_text(
            (bundles[name] / "tests" / "rules" / "gpu.test.yml").read_text()
        )
        assert promtool_each_file_on_its_slice(copy, only=("gpu.test.yml",)) == []


# -- a real Prometheus ----------------------------------------------------------------------------


@contextlib.contextmanager
def serve(page: Path) -> Iterator[str]:
    """A stand-in DCGM exporter answering /metrics with a saved page."""
    body = page.read_bytes()
    with stand_in(lambda: body) as address:
        yield address


FAST = {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
LOCAL = {"log_exporters": [], "probes": [], "alertmanagers": []}


def expected(page: Path, allocated: bool) -> dict[str, dict[str, float]]:
    """Per GPU UUID, what each per-GPU recording rule should hold, from the page itself."""
    fams = page_families(page)

    def values(name: str) -> dict[str, float]:
        if name not in fams:
            return {}
        return {s.labels["UUID"]: s.value for s in fams[name].samples if not allocated or s.labels.get("pod")}

    used, free, reserved = (
        values("DCGM_FI_DEV_FB_USED"),
        values("DCGM_FI_DEV_FB_FREE"),
        values("DCGM_FI_DEV_FB_RESERVED"),
    )
    out = {}
    for uuid in used:
        out[uuid] = {
            GpuNames.utilization: values("DCGM_FI_DEV_GPU_UTIL")[uuid] / 100,
            GpuNames.memory_used_bytes: used[uuid] * MIB,
            GpuNames.memory_free_bytes: free[uuid] * MIB,
            GpuNames.memory_used_ratio: used[uuid] / (used[uuid] + free[uuid] + reserved.get(uuid, 0)),
            GpuNames.temperature: values("DCGM_FI_DEV_GPU_TEMP")[uuid],
            GpuNames.power: values("DCGM_FI_DEV_POWER_USAGE")[uuid],
            GpuNames.xid: values("DCGM_FI_DEV_XID_ERRORS")[uuid],
        }
    return out


def check_recordings(
    prom: Prometheus, instance: str, want: dict[str, dict[str, float]], cluster: dict[str, str]
) -> None:
    """Every recording rule holds every GPU under the vLLM server, with its instance; nothing else."""
    for record in sorted(RECORDINGS):
        result = prom.wait_for(record, timeout=60)
        for sample in result:
            assert sample["metric"]["instance"] == instance, (record, sample)
            for label, value in cluster.items():
                assert sample["metric"][label] == value, (record, sample)
        if record.startswith("instance_gpu:"):
            got = {s["metric"]["UUID"]: float(s["value"][1]) for s in result}
            assert got.keys() == want.keys(), record
            for uuid, value in got.items():
                assert math.isclose(value, want[uuid][record], rel_tol=1e-9), (record, uuid, value)
            labels = {tuple(sorted(s["metric"])) for s in result}
            assert labels == {
                tuple(sorted({"__name__", "instance", "gpu", "UUID", "modelName", *cluster}))
            }, labels
        else:
            (sample,) = result
            per_gpu = [
                w[GpuNames.utilization if "utilization" in record else GpuNames.memory_used_ratio]
                for w in want.values()
            ]
            value = sum(per_gpu) / len(per_gpu) if "utilization" in record else max(per_gpu)
            assert math.isclose(float(sample["value"][1]), value, rel_tol=1e-9), record
    # The server-level series line up with vLLM's own on instance (what VllmGpuIdleWhileBusy joins on).
    on = ", ".join([*cluster, "instance"])
    joined = prom.wait_for(
        f"job_instance_model:vllm_requests_running:sum and on ({on}) {GpuNames.server_utilization}",
        timeout=60,
    )
    assert [s["metric"]["instance"] for s in joined] == [instance]


@pytest.mark.prometheus
def test_a_real_prometheus_ties_the_gpus_to_the_vllm_instance_by_relabelling(tmp_path):
    """join: instance, the compose stack: the generated scrape job does the join."""
    with serve(VLLM_PAGE) as vllm, serve(HOST_PAGE) as dcgm:
        config = {
            "prometheus": {"vllm_targets": [vllm], **LOCAL, **FAST},
            "gpu": {"enabled": True, "exporters": [{"target": dcgm, "vllm_instance": vllm}]},
        }
        bundle = generate(tmp_path / "bundle", "--metrics-file", str(VLLM_PAGE), config=config)
        with Prometheus(bundle / "prometheus" / "prometheus.yml", tmp_path) as prom:
            prom.wait_for('up{job="dcgm-exporter"} == 1', timeout=60)
            (up,) = prom.query('up{job="dcgm-exporter"}')
            assert up["metric"]["exporter_address"] == dcgm and up["metric"]["instance"] == vllm
            check_recordings(prom, vllm, expected(HOST_PAGE, allocated=False), {})


def kubernetes_config(
    bundle: Path, vllm: str, dcgm: str, honor_labels: bool, cluster: dict[str, str]
) -> Path:
    """Scrape jobs labelled as the Prometheus Operator labels them: the vLLM PodMonitor's target gets
    the vLLM pod's namespace and pod, the GPU ServiceMonitor's the exporter's own pod, and Prometheus
    renames the page's clashing labels to exported_* unless honor_labels is on."""
    pod = {"namespace": "llm", "pod": "vllm-0-7d9f8c6b5-abcde", "container": "vllm", **cluster}
    exporter = {
        "namespace": "gpu-operator",
        "pod": "nvidia-dcgm-exporter-x7k2p",
        "container": "nvidia-dcgm-exporter",
        "service": "nvidia-dcgm-exporter",
        "endpoint": "gpu-metrics",
        **cluster,
    }
    doc = {
        "global": FAST,
        "rule_files": [str(p) for p in sorted((bundle / "alerts").glob("*.rules.yml"))],
        "scrape_configs": [
            {"job_name": "vllm", "static_configs": [{"targets": [vllm], "labels": pod}]},
            {
                "job_name": "nvidia-dcgm-exporter",
                "honor_labels": honor_labels,
                "static_configs": [{"targets": [dcgm], "labels": exporter}],
            },
        ],
    }
    path = bundle / "kubernetes-prometheus.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.prometheus
@pytest.mark.parametrize(
    "honor_labels, multi_cluster",
    [(False, True), (True, False)],
    ids=["servicemonitor-exported-labels-multi-cluster", "honor-labels"],
)
def test_a_real_prometheus_ties_the_gpus_to_the_vllm_pod(tmp_path, honor_labels, multi_cluster):
    """join: pod, Kubernetes: GPUs 0 and 1 are the vLLM pod's, GPU 2 (with an old XID 79) nobody's."""
    cluster = {"k8s_cluster": "east"} if multi_cluster else {}
    with serve(VLLM_PAGE) as vllm, serve(OPERATOR_PAGE) as dcgm:
        config = {"gpu": POD, "prometheus": {**LOCAL, **FAST, **(MULTI if multi_cluster else {})}}
        bundle = generate(tmp_path / "bundle", "--metrics-file", str(VLLM_PAGE), config=config)
        path = kubernetes_config(bundle, vllm, dcgm, honor_labels, cluster)
        with Prometheus(path, tmp_path) as prom:
            stored = prom.wait_for('DCGM_FI_DEV_GPU_UTIL{gpu="0"}', timeout=60)[0]["metric"]
            # The page's pod labels as Prometheus stores them under each scrape setting.
            if honor_labels:
                assert stored["pod"] == "vllm-0-7d9f8c6b5-abcde" and "exported_pod" not in stored
            else:
                assert stored["exported_pod"] == "vllm-0-7d9f8c6b5-abcde"
                assert stored["pod"] == "nvidia-dcgm-exporter-x7k2p"
            check_recordings(prom, vllm, expected(OPERATOR_PAGE, allocated=True), cluster)
            time.sleep(2)
            assert not prom.query('ALERTS{alertname="VllmGpuXidError"}')
