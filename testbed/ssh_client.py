"""The ssh client of this host, as a researcher outside every pod uses it: one known_hosts file,
strict host-key checking (after the first connection), keys only, never a prompt."""

from __future__ import annotations

import subprocess
from pathlib import Path


class Ssh:
    """ssh to address:port; `first=True` accepts and records the host key, later calls demand it."""

    def __init__(self, directory: Path, address: str, port: int):
        self.directory, self.address, self.port = directory, address, port
        self.known_hosts = directory / "known_hosts"

    def run(self, user: str, key, command: str, first: bool = False) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["ssh", "-p", str(self.port), "-i", str(key), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
             "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "ConnectTimeout=10",
             "-o", f"StrictHostKeyChecking={'accept-new' if first else 'yes'}", f"{user}@{self.address}", command],
            capture_output=True, text=True, timeout=300)

    def password_login(self, user: str) -> subprocess.CompletedProcess:
        """An attempt with a password or keyboard-interactive only (BatchMode: no prompt, so no password sent)."""
        return subprocess.run(
            ["ssh", "-p", str(self.port), "-o", "PubkeyAuthentication=no",
             "-o", "PreferredAuthentications=password,keyboard-interactive", "-o", "BatchMode=yes",
             "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "StrictHostKeyChecking=yes",
             f"{user}@{self.address}", "id"], capture_output=True, text=True, timeout=60)


def key_pair(directory: Path, name: str) -> Path:
    """A new Ed25519 key without passphrase at directory/name (public key: name.pub)."""
    key = directory / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True)
    return key
