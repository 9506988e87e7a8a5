"""Fetch the libraries asv's HTML page loads (jQuery, flot, Bootstrap, ...) into a local cache.

Run once by ``tools/setup.sh``; ``tools/suite.py`` then copies them into the published page so
it works without internet (see swinkit/report/asv_offline/ for the list and the rewrite).
Each package is fetched with ``npm pack NAME@VERSION`` (the exact versions asv's page names),
and only the files the page needs are kept, under

    $XDG_CACHE_HOME/swinkit/asv-assets/NAME-VERSION/     (~/.cache by default;
                                                          $SWINKIT_ASV_ASSETS overrides)

with ``swinkit-fetched.json`` recording the version fetched and each file's sha256. Packages
already cached are not fetched again (``--force`` re-fetches). Standard library only: it runs
before the virtual environment exists.

Exit codes: 0 every package is cached; 1 some could not be fetched (each named; npm missing is
one such case); 2 bad arguments.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from swinkit.report.asv_offline import (  # noqa: E402  (after the path set-up)
    FETCHED, PACKAGES, NpmPackage, default_cache_dir, read_fetched)


def cached_ok(cache_dir: Path, package: NpmPackage) -> bool:
    """The package's folder holds every required file with the sha256 recorded at fetch time."""
    rec = read_fetched(cache_dir, package)
    if not rec:
        return False
    folder = cache_dir / package.folder
    for dest in package.files.values():
        path = folder / dest
        if not path.is_file() or rec.get("files", {}).get(dest) != _sha256(path.read_bytes()):
            return False
    return True


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def npm_pack(spec: str, workdir: Path) -> Path:
    """``npm pack SPEC`` into ``workdir``; the tarball's path (RuntimeError with npm's words)."""
    proc = subprocess.run(["npm", "pack", spec, "--ignore-scripts", "--silent"], cwd=workdir,
                          capture_output=True, text=True, timeout=300)
    tarballs = sorted(workdir.glob("*.tgz"))
    if proc.returncode != 0 or not tarballs:
        err = [line for line in (proc.stderr or "").splitlines()
               if "error" in line.lower() and "Unknown user config" not in line]
        raise RuntimeError(f"npm pack {spec} failed (exit {proc.returncode}): "
                           + ("; ".join(err[:3]) or proc.stdout.strip() or "no tarball"))
    return tarballs[0]


def extract(tarball: Path, package: NpmPackage, version: str, dest: Path) -> dict[str, str]:
    """Write the package's files from ``tarball`` into ``dest``; {dest path: sha256}."""
    wanted = {**{k: (v, True) for k, v in package.files.items()},
              **{k: (v, False) for k, v in package.optional.items()}}
    hashes: dict[str, str] = {}
    with tarfile.open(tarball, "r:gz") as tar:
        members = {}
        for m in tar.getmembers():
            # npm tarballs hold one top folder, usually package/
            inner = m.name.split("/", 1)[1] if "/" in m.name else m.name
            if m.isfile() and inner in wanted:
                members[inner] = m
        missing = [k for k, (_, required) in wanted.items() if required and k not in members]
        if missing:
            raise RuntimeError(f"{package.name}@{version}: the package has no {', '.join(missing)}")
        for inner, m in members.items():
            data = tar.extractfile(m).read()
            out = dest / wanted[inner][0]
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data)
            hashes[wanted[inner][0]] = _sha256(data)
    return hashes


def fetch(package: NpmPackage, cache_dir: Path) -> str:
    """Fetch one package into the cache (exact version, else a declared fallback); what it got."""
    errors = []
    for version in (package.version, *package.fallbacks):
        spec = f"{package.name}@{version}"
        with tempfile.TemporaryDirectory(prefix="swinkit-npm-") as work:
            work = Path(work)
            try:
                tarball = npm_pack(spec, work)
                staging = Path(tempfile.mkdtemp(prefix=f".{package.folder}-", dir=cache_dir))
                try:
                    hashes = extract(tarball, package, version, staging)
                    record = {"name": package.name, "version": version,
                              "wanted": package.version,
                              "tarball_sha256": _sha256(tarball.read_bytes()), "files": hashes}
                    (staging / FETCHED).write_text(json.dumps(record, indent=1) + "\n")
                    final = cache_dir / package.folder
                    if final.exists():
                        shutil.rmtree(final)
                    staging.rename(final)
                finally:
                    if staging.exists():
                        shutil.rmtree(staging)
            except (RuntimeError, OSError, tarfile.TarError, subprocess.TimeoutExpired) as e:
                errors.append(str(e))
                continue
        if version != package.version:
            return (f"{spec} (the registry does not offer {package.name}@{package.version}: "
                    "fallback used, its integrity attribute will be dropped)")
        return spec
    raise RuntimeError("; ".join(errors))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cache", type=Path, default=None,
                   help=f"cache folder (default {default_cache_dir()})")
    p.add_argument("--force", action="store_true", help="fetch again even if cached")
    args = p.parse_args(argv)
    cache_dir = args.cache or default_cache_dir()
    todo = [pkg for pkg in PACKAGES if args.force or not cached_ok(cache_dir, pkg)]
    if not todo:
        print(f"[asv-assets] all {len(PACKAGES)} packages cached in {cache_dir}")
        return 0
    names = ", ".join(f"{p.name}@{p.version}" for p in todo)
    if shutil.which("npm") is None:
        print(f"[asv-assets] npm not found: cannot fetch {names} for the offline asv page "
              "(install npm, e.g. apt-get install npm, and re-run python3 "
              "tools/fetch_asv_assets.py); tools/suite.py will name what is missing",
              file=sys.stderr)
        return 1
    cache_dir.mkdir(parents=True, exist_ok=True)
    failed = []
    for pkg in todo:
        try:
            got = fetch(pkg, cache_dir)
            print(f"[asv-assets] {got} -> {cache_dir / pkg.folder}")
        except RuntimeError as e:
            failed.append(f"{pkg.name}@{pkg.version}: {e}")
    if failed:
        print("[asv-assets] could not fetch:\n  " + "\n  ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
