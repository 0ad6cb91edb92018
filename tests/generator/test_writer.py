"""Writing a bundle: all or nothing, stale files removed, other files left alone."""

from __future__ import annotations

import json

import pytest
from vllm_obs.errors import BundleError
from vllm_obs.writer import check_bundle, write_bundle


def test_writes_every_file_and_a_manifest(tmp_path):
    files = {
        "a/x.yml": "x\n",
        "b.json": "{}\n",
        ".vllm-obs-manifest.json": json.dumps(
            {"generated_by": "vllm-obs", "files": ["a/x.yml", "b.json", ".vllm-obs-manifest.json"]}
        ),
    }
    assert write_bundle(files, tmp_path / "out") == []
    assert (tmp_path / "out" / "a" / "x.yml").read_text() == "x\n"
    assert check_bundle(files, tmp_path / "out") == []


def manifest(*paths: str) -> dict[str, str]:
    return {".vllm-obs-manifest.json": json.dumps({"generated_by": "vllm-obs", "files": sorted(paths)})}


def test_files_the_bundle_no_longer_produces_are_removed_but_user_files_stay(tmp_path):
    out = tmp_path / "out"
    write_bundle({"old.json": "1\n", "keep.json": "1\n", **manifest("old.json", "keep.json")}, out)
    (out / "mine.txt").write_text("user\n")
    removed = write_bundle({"keep.json": "2\n", **manifest("keep.json")}, out)
    assert removed == ["old.json"]
    assert not (out / "old.json").exists()
    assert (out / "keep.json").read_text() == "2\n"
    assert (out / "mine.txt").read_text() == "user\n"


def test_a_failure_part_way_restores_the_previous_files(tmp_path):
    out = tmp_path / "out"
    write_bundle({"a.yml": "old a\n", "b.yml": "old b\n"}, out)
    (out / "z").mkdir()  # a directory where the new bundle wants a file
    with pytest.raises(BundleError, match="is a directory"):
        write_bundle({"a.yml": "new a\n", "b.yml": "new b\n", "z": "file\n"}, out)
    assert (out / "a.yml").read_text() == "old a\n"
    assert (out / "b.yml").read_text() == "old b\n"
    assert not list(out.glob(".vllm-obs-staging-*"))


def test_check_reports_differences_missing_and_stale_files(tmp_path):
    out = tmp_path / "out"
    write_bundle({"a.yml": "a\n", "gone.yml": "g\n", **manifest("a.yml", "gone.yml")}, out)
    problems = check_bundle({"a.yml": "changed\n", "new.yml": "n\n", **manifest("a.yml", "new.yml")}, out)
    assert "a.yml differs" in problems
    assert "new.yml is missing" in problems
    assert "gone.yml is no longer generated" in problems


def test_a_tampered_manifest_cannot_delete_outside_the_bundle(tmp_path):
    out = tmp_path / "out"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out.mkdir()
    (out / ".vllm-obs-manifest.json").write_text(
        json.dumps({"generated_by": "vllm-obs", "files": ["../victim.txt", str(victim)]})
    )
    write_bundle({"a.yml": "a\n"}, out)
    assert victim.read_text() == "precious\n"
