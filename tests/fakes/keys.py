"""RSA signing keys with self-signed X.509 certificates, as Google serves its token keys."""

from __future__ import annotations

import datetime as dt
import ipaddress

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID


def key_and_cert(
    common_name: str = "spark-test", hosts: tuple[str, ...] = ()
) -> tuple[rsa.RSAPrivateKey, str]:
    """A fresh RS256 key and its certificate (PEM), valid from yesterday to tomorrow;
    with ``hosts``, a server's certificate for those names and addresses, which a client
    may trust as its own authority."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(days=1))
        .not_valid_after(now + dt.timedelta(days=1))
    )
    if hosts:
        names = [_general_name(host) for host in hosts]
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
    cert = builder.sign(key, hashes.SHA256())
    return key, cert.public_bytes(serialization.Encoding.PEM).decode()


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
