"""A tiny OCI image layout made here, for container jobs (`srun --container`).

It stands for a researcher's framework image: a user unpacks it with `umoci unpack
--rootless` into a bundle on the shared home and runs it as a job step. It holds a
shell, a few coreutils and the libraries they link, copied out of a Debian root (the
Slurm rootfs), and an /etc/os-release that says which image it is, so a test can
tell the container's files from the node's.

Written as an OCI image layout (oci-layout, index.json, blobs/sha256/...) with one
uncompressed layer: what `umoci` reads, and what `skopeo copy docker-archive:...
oci:...` would make of a Docker image.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from pathlib import Path

from images.build import CHROOT_PATH

# What the image's os-release says (ID= and the name a test looks for).
IMAGE_ID = "kubeslurm-job-image"
IMAGE_TAG = "v1"
PROGRAMS = ("/bin/sh", "/usr/bin/cat", "/usr/bin/id", "/usr/bin/ls", "/usr/bin/readlink", "/usr/bin/sleep")
# Empty directories a runtime mounts over (proc, sys, dev, tmp) and the shared home.
DIRECTORIES = ("bin", "dev", "etc", "home", "lib64", "proc", "sys", "tmp", "usr", "usr/bin", "usr/lib",
               "usr/lib/x86_64-linux-gnu")
MTIME = 0  # reproducible byte for byte


def _libraries(root: Path, program: str) -> set[str]:
    """Paths (inside root) of the shared libraries `program` loads, from ldd run in root."""
    out = subprocess.run(["chroot", str(root), "ldd", program], env={"PATH": CHROOT_PATH},
                         capture_output=True, text=True, check=True).stdout
    paths = set()
    for line in out.splitlines():
        words = line.split()
        for word in words:
            if word.startswith("/"):
                paths.add(word)
    return paths


def _resolved(root: Path, path: str) -> str:
    """The path inside root that `path` names once every symlink is followed (usrmerge: /bin -> usr/bin)."""
    return "/" + (root / path.lstrip("/")).resolve().relative_to(root.resolve()).as_posix()


def _layer(root: Path) -> bytes:
    files: dict[str, str] = {}  # path in the image -> path in root
    for program in PROGRAMS:
        files[_resolved(root, program)] = program
        for library in _libraries(root, program):
            files[_resolved(root, library)] = library
    os_release = f'NAME="kubeslurm job image"\nID={IMAGE_ID}\nVERSION_ID={IMAGE_TAG}\n'.encode()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add(info: tarfile.TarInfo, data: bytes | None = None) -> None:
            info.mtime, info.uid, info.gid, info.uname, info.gname = MTIME, 0, 0, "", ""
            tar.addfile(info, io.BytesIO(data) if data is not None else None)

        for directory in DIRECTORIES:
            info = tarfile.TarInfo(directory)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if directory == "tmp" else 0o755
            add(info)
        for image_path, source in sorted(files.items()):
            data = (root / image_path.lstrip("/")).read_bytes()
            info = tarfile.TarInfo(image_path.lstrip("/"))
            info.size, info.mode = len(data), 0o755
            add(info, data)
        # Debian's usrmerge links, so /bin/sh and /lib64/ld-linux-x86-64.so.2 resolve.
        for link, target in (("bin/sh", "/usr/bin/dash"), ("lib64/ld-linux-x86-64.so.2",
                                                           "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")):
            if "/" + link not in files:
                info = tarfile.TarInfo(link)
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
                add(info)
        info = tarfile.TarInfo("etc/os-release")
        info.size, info.mode = len(os_release), 0o644
        add(info, os_release)
    return buffer.getvalue()


def _blob(blobs: Path, data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    (blobs / digest).write_bytes(data)
    return {"digest": f"sha256:{digest}", "size": len(data)}


def write_oci_layout(source_root: Path, out: Path) -> str:
    """Write the image as an OCI image layout in `out` (made empty first is the caller's
    business); returns the image reference for umoci (`<out>:<tag>`)."""
    blobs = out / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    layer = _layer(source_root)
    layer_descriptor = {"mediaType": "application/vnd.oci.image.layer.v1.tar", **_blob(blobs, layer)}
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": ["PATH=/usr/bin:/bin"], "Cmd": ["/bin/sh"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}"]},
    }
    config_descriptor = {"mediaType": "application/vnd.oci.image.config.v1+json",
                         **_blob(blobs, json.dumps(config, sort_keys=True).encode())}
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": config_descriptor, "layers": [layer_descriptor]}
    manifest_descriptor = {"mediaType": "application/vnd.oci.image.manifest.v1+json",
                           **_blob(blobs, json.dumps(manifest, sort_keys=True).encode()),
                           "annotations": {"org.opencontainers.image.ref.name": IMAGE_TAG}}
    (out / "oci-layout").write_text(json.dumps({"imageLayoutVersion": "1.0.0"}))
    (out / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [manifest_descriptor]}))
    return f"{out}:{IMAGE_TAG}"
