"""Every variant bundle whose generated promtool tests run only in the full matrix (`make test-all`)
is still generated and checked by promtool in `make test`: its rules load and its config parses."""

from __future__ import annotations

import pytest

from tests.generator.test_features import FEATURE_BUNDLES
from tests.generator.test_features import METRICS as CAPTURES
from tests.generator.test_gpu import BUNDLES as GPU_BUNDLES
from tests.generator.test_gpu import IN_MAKE_TEST as GPU_IN_MAKE_TEST
from tests.generator.test_multi_cluster import MULTI
from tests.generator.test_platforms import IN_MAKE_TEST as PLATFORMS_IN_MAKE_TEST
from tests.generator.test_platforms import PLATFORMS
from tests.generator.test_pod_labels import PODS
from tests.generator.test_rules import (
    CANARY_OFF,
    CUSTOM,
    ERAS,
    ERAS_IN_MAKE_TEST,
    EXPOSITIONS,
    EXPOSITIONS_IN_MAKE_TEST,
    FIXTURES,
    NO_FAILURE_COUNT,
    promtool,
)
from tests.support.bundles import generate
from tests.support.tiers import matrix_only

pytestmark = pytest.mark.prometheus

# id -> (generate's arguments, config or None): the variants `make test` runs no generated test of.
VARIANTS: dict[str, tuple[tuple[str, ...], dict | None]] = {
    **{
        f"era-{release}-{engine}": (
            ("--vllm-version", release, "--engine", engine),
            CANARY_OFF if (release, engine) == NO_FAILURE_COUNT else None,
        )
        for release, engine in matrix_only(ERAS, ERAS_IN_MAKE_TEST)
    },
    **{
        f"exposition-{name}": (("--metrics-file", str(FIXTURES / name)), None)
        for name in matrix_only(EXPOSITIONS, EXPOSITIONS_IN_MAKE_TEST)
    },
    **{f"features-{' '.join(args)}": (args, None) for args in FEATURE_BUNDLES},
    **{
        f"platform-{key}": (("--metrics-file", str(fixture)), None)
        for key, (_, fixture) in PLATFORMS.items()
        if key in matrix_only(PLATFORMS, PLATFORMS_IN_MAKE_TEST)
    },
    "data-parallel": (("--metrics-file", str(CAPTURES / "vllm-0.32.0-cpu-data-parallel.prom")), None),
    **{f"gpu-{name}": ((), GPU_BUNDLES[name]) for name in matrix_only(GPU_BUNDLES, GPU_IN_MAKE_TEST)},
    "pod-labels": ((), PODS),
    "multi-cluster": ((), MULTI),
    "custom-thresholds": ((), CUSTOM),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_a_variant_bundle_loads_in_promtool(name, tmp_path):
    args, config = VARIANTS[name]
    bundle = generate(tmp_path / "bundle", *args, config=config)
    rules = sorted(str(p.relative_to(bundle)) for p in (bundle / "alerts").glob("*.rules.yml"))
    for check in (("check", "rules", *rules), ("check", "config", "prometheus/prometheus.yml")):
        result = promtool(*check, cwd=bundle)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert list((bundle / "tests" / "rules").glob("*.test.yml")), "no generated promtool test"
