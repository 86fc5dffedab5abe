"""What a cluster needs to run the jobs: the library as one `--py-files` archive, and the
spark-submit options that go with it (`lakehouse spark-submit-args` prints them).

The archive holds the `lakehouse` package the jobs import, without the local dev stack and the
operator's command line (a cluster node runs neither). Executors import it from the archive
Spark ships them, never from a checkout or a virtual environment that happens to be there.
"""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import lakehouse
from lakehouse.core.settings import Settings, project_root

# Packages of `lakehouse` a job never imports (the jobs' tests on a cluster prove it).
_LOCAL_ONLY = frozenset({"devstack", "cli"})
# A fixed timestamp, so the same sources give the same bytes (and the same cached archive).
_EPOCH = (1980, 1, 1, 0, 0, 0)


def library_archive(dest: Path | None = None) -> Path:
    """`lakehouse-<version>.zip` of the package's sources in `dest` (default
    `.lakehouse/dist` of the project), rewritten only when its content changed."""
    package = Path(lakehouse.__file__).resolve().parent
    target = (dest or project_root() / ".lakehouse" / "dist") / (
        f"lakehouse-{lakehouse.__version__}.zip"
    )
    content = _zip_bytes(package)
    if not target.is_file() or target.read_bytes() != content:
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".zip.{os.getpid()}.tmp")  # two writers: two files
        partial.write_bytes(content)
        partial.replace(target)  # a concurrent spark-submit never ships half an archive
    return target


def _zip_bytes(package: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(package.rglob("*.py")):
            relative = path.relative_to(package)
            if relative.parts[0] in _LOCAL_ONLY:
                continue
            info = zipfile.ZipInfo(f"lakehouse/{relative.as_posix()}", _EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, path.read_bytes())
    return buffer.getvalue()


def submit_args(settings: Settings, archive: Path) -> list[str]:
    """The spark-submit options of a job: the JVM packages (the jar files the set-up resolved,
    else their coordinates), the library archive and every
    Spark option the local session factory sets, except what belongs to the cluster (master,
    driver address)."""
    from lakehouse.core.driver import resolved_jars
    from lakehouse.core.spark import CLUSTER_OWNED, session_conf

    conf = session_conf(settings)
    packages = conf.pop("spark.jars.packages")
    jars = resolved_jars(settings, conf["spark.jars.ivy"])
    if jars:  # the set-up resolved them: spark-submit ships the files, no Ivy resolution
        conf.pop("spark.jars.ivy")
        parts = ["--jars", ",".join(jars)]
    else:
        parts = ["--packages", packages]
    parts += ["--py-files", str(archive)]
    for key in CLUSTER_OWNED | {"spark.app.name"}:
        conf.pop(key, None)
    for key, value in sorted(conf.items()):
        parts += ["--conf", f"{key}={value}"]
    return parts
