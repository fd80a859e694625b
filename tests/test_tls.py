"""TLS between coordinator, scheduler and workers (distributed.Security); a client without
the certificates is refused."""

from __future__ import annotations

import datetime
import ipaddress
import subprocess
import sys

import pytest

from hpsearch import Study
from hpsearch.testing import user_spec

pytestmark = pytest.mark.slow


def _certificates(folder):
    """A CA and one certificate for 127.0.0.1 signed by it (PEM files)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)

    def name(cn):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("hpsearch test CA"))
        .issuer_name(name("hpsearch test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = {"ca_file": folder / "ca.pem", "cert": folder / "node.pem", "key": folder / "node.key"}
    paths["ca_file"].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths["cert"].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths["key"].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return {k: str(v) for k, v in paths.items()}


def _refused(address: str) -> bool:
    """Whether a client without certificates is refused (tried in a process of its own: a
    Client that fails to connect is collected later, and closing it then can deadlock with
    a cluster being started in the same process)."""
    probe = f"from distributed import Client; Client({address!r}, timeout=5).close()"
    try:
        proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, timeout=60)
    except subprocess.TimeoutExpired:
        return True
    return proc.returncode != 0


def test_local_cluster_with_temporary_tls(run_dir):
    from distributed import Client

    from hpsearch.cluster import start_local_cluster
    from hpsearch.cluster._base import security

    sec = security("auto")
    cluster = start_local_cluster(n_workers=1, gpus_per_trial=1, security=sec)
    try:
        assert cluster.scheduler_address.startswith("tls://127.0.0.1:")
        assert _refused(cluster.scheduler_address)
        with Client(cluster, security=sec) as client:
            spec = user_spec("secure-local", "hpsearch.testing.objectives:staircase", n_trials=2)
            result = Study(spec, run_dir=run_dir, client=client).run(progress=False)
            assert result.progress.ended == 2 and result.progress.failed == 0
            assert all(a.startswith("tls://") for a in client.scheduler_info()["workers"])
    finally:
        cluster.close(timeout=20)
