"""`python -m loghubd_spark.pack OUT.zip`: loghubd and loghubd_spark as one zip for
`spark-submit --py-files OUT.zip` (or `spark.submit.pyFiles`).

Only the two pure-Python packages go in: executors still need their dependencies (aiohttp,
anyio, pluggy, structlog, prometheus-client, protobuf, lz4, zstandard, pyarrow), which have C
extensions and cannot be shipped this way. Where the cluster's Python lacks them, ship a whole
environment instead (`spark.archives`, see README.md).
"""

from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path

PACKAGES = ("loghubd", "loghubd_spark")
SUFFIXES = (".py", ".typed")


def package_dir(name: str) -> Path:
    module = __import__(name)
    return Path(module.__file__ or "").resolve().parent


def build(out: Path) -> list[str]:
    """Write the zip; returns the archive names written."""
    names: list[str] = []
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name in PACKAGES:
            root = package_dir(name)
            for path in sorted(root.rglob("*")):
                if path.is_file() and path.suffix in SUFFIXES and "__pycache__" not in path.parts:
                    arcname = f"{name}/{path.relative_to(root).as_posix()}"
                    zf.write(path, arcname)
                    names.append(arcname)
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loghubd_spark.pack", description=__doc__)
    parser.add_argument("out", help="the zip to write, e.g. dist/loghubd-pyfiles.zip")
    args = parser.parse_args(argv)
    names = build(Path(args.out))
    print(f"{args.out}: {len(names)} files ({', '.join(PACKAGES)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
