"""Building and running the image with Debian's podman, on a machine with no image registry.

The base is a local stand-in for python:3.11-slim (Debian with its python3, pip and venv,
made with debootstrap and `podman import`), kept between runs under the cache folder and
keyed by its recipe; the Dockerfile is built as written, only its base named by the
`BASE_IMAGE` build argument. Pip inside the build uses this machine's index settings and CA
bundle, mounted into the build's steps (never written into the image). podman and
debootstrap are installed with apt-get when missing, as the browser test does chromium.
"""

from __future__ import annotations

import configparser
import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx

CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "context-proxy-ci"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")  # Debian's, where pip in the build reads it
# The stand-in's recipe: Debian 12 gives Python 3.11, the version of python:3.11-slim.
SUITE = "bookworm"
PACKAGES = ("python3", "python3-pip", "python3-venv", "ca-certificates")
# What the official image leaves out, and the marker that stops pip installing system-wide.
PRUNE = (
    "usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale",
    "var/cache/apt", "var/lib/apt/lists", "usr/lib/python3.11/EXTERNALLY-MANAGED",
)  # fmt: skip
IMPORT_CHANGES = ("ENV LANG=C.UTF-8", 'CMD ["python3"]')
RECIPE = repr((SUITE, PACKAGES, PRUNE, IMPORT_CHANGES, 1))
# Containers get explicit limits: the runtime's defaults ask for more open files than a
# sandbox may grant.
ULIMITS = ("--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096")
# pip settings that reach an index, taken from this machine into the build.
PIP_KEYS = ("index-url", "extra-index-url", "trusted-host", "default-timeout", "timeout", "retries", "proxy")  # fmt: skip


def ensure_tools() -> None:
    """podman, runc and debootstrap, from Debian's packages when missing (as root)."""
    wanted = {"podman": "podman", "runc": "runc", "debootstrap": "debootstrap"}
    missing = [pkg for tool, pkg in wanted.items() if shutil.which(tool) is None]
    if not missing:
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise RuntimeError(f"the image test needs {missing}: install them with apt-get as root")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env, capture_output=True)
    subprocess.run(
        ["apt-get", "install", "-y", "-q", *missing], check=True, env=env, capture_output=True
    )


def podman(*argv: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """podman with the CI's own store (vfs: no overlay mounts needed) and runc."""
    store = ("--root", str(CACHE / "storage"), "--runroot", str(CACHE / "run"))
    command = ["podman", "--storage-driver", "vfs", *store, "--runtime", "runc",
               "--cgroup-manager", "cgroupfs", "--events-backend", "file", *argv]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def stand_in_base() -> str:
    """The stand-in base's image name, made (and its tarball cached) when missing."""
    key = hashlib.sha256(RECIPE.encode()).hexdigest()[:12]
    name = f"localhost/context-proxy-ci-base:{key}"
    if podman("image", "exists", name, check=False).returncode == 0:
        return name
    tarball = CACHE / f"base-{key}.tar"
    if not tarball.is_file():
        _debootstrap(tarball)
    changes = [arg for change in IMPORT_CHANGES for arg in ("--change", change)]
    podman("import", *changes, str(tarball), name)
    return name


def _debootstrap(tarball: Path) -> None:
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE) as work:
        root = Path(work) / "root"
        command = ["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE,
                   str(root), *_mirror()]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=1200, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"debootstrap failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
        for path in PRUNE:
            target = root / path
            if target.is_dir():
                shutil.rmtree(target)
                target.mkdir()
            else:
                target.unlink(missing_ok=True)
        partial = tarball.with_suffix(".partial")
        subprocess.run(["tar", "-C", str(root), "-cf", str(partial), "."], check=True)
        partial.rename(tarball)


def _mirror() -> list[str]:
    """This machine's Debian archive, as its apt sources name it (else debootstrap's own)."""
    for source in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for line in source.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return [line.split()[1]]
    return []


def pip_settings(folder: Path) -> list[str]:
    """Mounts for a build's steps: this machine's CA bundle where Debian keeps it, and a
    pip.conf with its index settings (local file indexes left out) pointing pip at it."""
    done = subprocess.run(["pip", "config", "list"], capture_output=True, text=True, check=False)
    found: dict[str, str] = {}
    for line in done.stdout.splitlines():
        name, _, value = line.partition("=")
        key = name.rsplit(".", 1)[-1]
        if key in PIP_KEYS:
            found[key] = value.strip().strip("'\"")
    for key in PIP_KEYS:
        value = os.environ.get("PIP_" + key.upper().replace("-", "_"))
        if value:
            found[key] = value
    for key in ("index-url", "extra-index-url"):
        urls = [u for u in found.pop(key, "").split() if not u.startswith("file:")]
        if urls:
            found[key] = " ".join(urls)
    config = configparser.ConfigParser()
    config["global"] = {**found, "cert": str(CA_BUNDLE)}
    conf = folder / "pip.conf"
    with conf.open("w") as out:
        config.write(out)
    mounts = ["-v", f"{conf}:/etc/pip.conf:ro"]
    if CA_BUNDLE.is_file():
        mounts += ["-v", f"{CA_BUNDLE}:{CA_BUNDLE}:ro"]
    return mounts


def build(context: Path, tag: str, base: str, work: Path) -> None:
    """`docker build -t TAG .` as podman does it here: the Dockerfile as written, its base
    swapped by the build argument, the docker format (it keeps HEALTHCHECK)."""
    # No layer cache (--layers=false): with the vfs driver every cached layer is a whole
    # copy of the file system (gigabytes a build); building afresh is quicker here, and
    # leaves only the image in the store.
    podman("rmi", "-f", tag, check=False)
    podman(
        "build", "--isolation", "chroot", "--format", "docker", "--layers=false",
        "--build-arg", f"BASE_IMAGE={base}", *pip_settings(work), *ULIMITS, "-t", tag,
        str(context), timeout=1800,
    )  # fmt: skip


def run(tag: str, name: str, options: Sequence[str]) -> None:
    podman("run", "-d", "--name", name, *ULIMITS, *options, tag)


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """One build at a time on this machine (the store and the base's tarball are shared)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def prune_old() -> None:
    """Untagged images and stopped containers left by earlier builds: the store keeps the
    base and the image alone."""
    podman("container", "prune", "-f", check=False)
    podman("image", "prune", "-f", check=False)


def wait_healthy(url: str, seconds: float) -> float:
    """Seconds until `url`/healthz answered 200; fails after `seconds`."""
    started = time.monotonic()
    while time.monotonic() - started < seconds:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return time.monotonic() - started
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url}/healthz did not answer within {seconds} s")
