"""A throw-away certificate authority for the TLS tests, made with the real `openssl` command
(scripts/test.sh installs Debian's openssl when it is missing): a CA, a server certificate
for 127.0.0.1 and ingest.test (a name only the tests' proxy resolves) and a client
certificate, all signed by the CA, EC P-256, valid for two days."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pki:
    ca: Path  # the CA certificate (PEM): what a client verifies the server with
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str, cwd: Path) -> None:
    exe = shutil.which("openssl")
    assert exe, "openssl is missing: scripts/test.sh installs Debian's openssl"
    result = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"openssl {' '.join(args)}:\n{result.stderr}"


def _signed(directory: Path, name: str, subject: str, extensions: str) -> tuple[Path, Path]:
    key, csr, cert = (directory / f"{name}.{ext}" for ext in ("key", "csr", "pem"))
    (directory / f"{name}.ext").write_text(extensions)
    _openssl(
        *("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"),
        *("-nodes", "-keyout", key.name, "-out", csr.name, "-subj", subject),
        cwd=directory,
    )
    _openssl(
        *("x509", "-req", "-in", csr.name, "-CA", "ca.pem", "-CAkey", "ca.key"),
        *("-CAcreateserial", "-days", "2", "-out", cert.name, "-extfile", f"{name}.ext"),
        cwd=directory,
    )
    return cert, key


def make_pki(directory: Path) -> Pki:
    directory.mkdir(parents=True, exist_ok=True)
    _openssl(
        *("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"),
        *("-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2"),
        *("-subj", "/CN=loghubd test CA"),
        *("-addext", "basicConstraints=critical,CA:TRUE"),
        *("-addext", "keyUsage=critical,keyCertSign,cRLSign"),
        cwd=directory,
    )
    server_cert, server_key = _signed(
        directory,
        "server",
        "/CN=127.0.0.1",
        "subjectAltName=IP:127.0.0.1,DNS:ingest.test\nextendedKeyUsage=serverAuth\n",
    )
    client_cert, client_key = _signed(
        directory, "client", "/CN=loghubd-client", "extendedKeyUsage=clientAuth\n"
    )
    return Pki(directory / "ca.pem", server_cert, server_key, client_cert, client_key)
