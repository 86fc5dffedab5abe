"""The library archive a cluster's spark-submit ships, and the options printed with it."""

from __future__ import annotations

import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

import lakehouse
from lakehouse.core.deploy import library_archive, submit_args
from lakehouse.core.driver import record_resolution
from lakehouse.core.settings import Settings, SparkSettings

pytestmark = pytest.mark.pure  # no service, no table: `./dev test -m pure`

PACKAGE = Path(lakehouse.__file__).resolve().parent


def test_the_archive_holds_every_library_module_and_neither_the_dev_stack_nor_the_cli(
    tmp_path: Path,
) -> None:
    archive = library_archive(tmp_path)

    assert archive == tmp_path / f"lakehouse-{lakehouse.__version__}.zip"
    expected = sorted(
        f"lakehouse/{p.relative_to(PACKAGE).as_posix()}"
        for p in PACKAGE.rglob("*.py")
        if p.relative_to(PACKAGE).parts[0] not in {"devstack", "cli"}
    )
    with zipfile.ZipFile(archive) as opened:
        names = opened.namelist()
        assert names == expected
        assert opened.read("lakehouse/core/deploy.py") == (PACKAGE / "core/deploy.py").read_bytes()
    assert "lakehouse/bronze/ingest.py" in names
    assert not any(n.startswith(("lakehouse/devstack/", "lakehouse/cli/")) for n in names)


def test_the_same_sources_leave_the_archive_untouched(tmp_path: Path) -> None:
    first = library_archive(tmp_path)
    written = first.stat().st_mtime_ns
    content = first.read_bytes()

    again = library_archive(tmp_path)

    assert again.read_bytes() == content
    assert again.stat().st_mtime_ns == written  # not rewritten: a running submit keeps its file


def test_a_changed_archive_is_rewritten(tmp_path: Path) -> None:
    archive = library_archive(tmp_path)
    archive.write_bytes(b"stale")

    assert library_archive(tmp_path).read_bytes()[:2] == b"PK"


def test_submit_args_leave_master_and_driver_address_to_the_cluster(tmp_path: Path) -> None:
    archive = tmp_path / "lib.zip"
    settings = replace(Settings(), spark=replace(SparkSettings(), ivy_dir=str(tmp_path / "ivy")))

    args = submit_args(settings, archive)  # nothing resolved in this Ivy dir: coordinates

    assert args[:4] == ["--packages", ",".join(settings.spark.packages), "--py-files", str(archive)]
    confs = [args[i + 1] for i, a in enumerate(args) if a == "--conf"]
    keys = [c.split("=", 1)[0] for c in confs]
    assert keys == sorted(keys)
    for owned in (
        "spark.master",
        "spark.driver.host",
        "spark.driver.bindAddress",
        "spark.app.name",
    ):
        assert owned not in keys
    assert "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension" in confs
    assert f"spark.jars.ivy={tmp_path / 'ivy'}" in confs
    assert len(args) == 4 + 2 * len(confs)


def test_submit_args_ship_the_jars_the_set_up_resolved(tmp_path: Path) -> None:
    ivy = tmp_path / "ivy"
    (ivy / "jars").mkdir(parents=True)
    names = ["io.delta_delta-spark_2.13-4.0.0.jar", "org.slf4j_slf4j-api-2.0.16.jar"]
    for name in names:
        (ivy / "jars" / name).write_bytes(b"PK")
    settings = replace(Settings(), spark=replace(SparkSettings(), ivy_dir=str(ivy)))
    spark_jars = ",".join(f"file://{ivy / 'jars' / n}" for n in names)  # as Spark reports them
    record_resolution(settings, str(ivy), spark_jars)

    args = submit_args(settings, tmp_path / "lib.zip")

    assert args[:2] == ["--jars", ",".join(str(ivy / "jars" / n) for n in names)]
    assert not any(a.startswith("spark.jars.ivy=") for a in args)  # no Ivy resolution at all
    (ivy / "jars" / names[1]).unlink()  # a jar gone: back to resolving the coordinates
    assert submit_args(settings, tmp_path / "lib.zip")[0] == "--packages"
    other = replace(settings, spark=replace(settings.spark, packages=("g:a:1",)))
    assert submit_args(other, tmp_path / "lib.zip")[:2] == ["--packages", "g:a:1"]
