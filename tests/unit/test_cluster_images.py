"""The local cluster's docker-archive writer: what `ctr images import` reads."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

from testbed.local_cluster.system_images import Entry, Image, write_docker_archive


def test_docker_archive_layout_and_digests(tmp_path):
    image = Image("kubeslurm.local/t:1", [Entry("bin/tool", data=b"#!/bin/sh\n", mode=0o755),
                                          Entry("bin/alias", "symlink", target="/bin/tool")],
                  entrypoint=["/bin/tool"])
    out = write_docker_archive(image, tmp_path / "t.tar")
    again = write_docker_archive(image, tmp_path / "t2.tar")
    assert out.read_bytes() == again.read_bytes()  # reproducible

    with tarfile.open(out) as tar:
        (manifest,) = json.load(tar.extractfile("manifest.json"))
        assert manifest["RepoTags"] == ["kubeslurm.local/t:1"]
        config_bytes = tar.extractfile(manifest["Config"]).read()
        layer = tar.extractfile(manifest["Layers"][0]).read()
    config = json.loads(config_bytes)
    assert manifest["Config"] == hashlib.sha256(config_bytes).hexdigest() + ".json"
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer).hexdigest()]
    assert config["config"]["Entrypoint"] == ["/bin/tool"]
    with tarfile.open(fileobj=io.BytesIO(layer)) as lt:
        members = {m.name: m for m in lt.getmembers()}
    assert list(members) == ["bin", "bin/alias", "bin/tool"]  # parents first, sorted
    assert members["bin/tool"].mode == 0o755 and members["bin/alias"].linkname == "/bin/tool"
    assert {m.uid for m in members.values()} == {0}
