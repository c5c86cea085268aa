"""Certificates made with `cryptography`: a CA and the leaves it signs.

Controllers use them for development webhook serving certificates (in production cert-manager or the chart
provides the files); the testbed uses them for its API server, admin client and webhooks.
"""

from __future__ import annotations

import dataclasses
import datetime
import ipaddress
import pathlib

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=365)


@dataclasses.dataclass(frozen=True)
class KeyPair:
    cert: pathlib.Path
    key: pathlib.Path


def ensure_ca(directory: pathlib.Path) -> KeyPair:
    pair = KeyPair(directory / "ca.crt", directory / "ca.key")
    if pair.cert.exists() and pair.key.exists():
        return pair
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mnnvl-testbed-ca")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    _write(pair, cert, key)
    return pair


def issue(
    ca: KeyPair,
    pair: KeyPair,
    *,
    common_name: str,
    organizations: tuple[str, ...] = (),
    hosts: tuple[str, ...] = (),
    client: bool = False,
) -> KeyPair:
    """A leaf certificate signed by `ca`: a server certificate for `hosts`, or a client one."""
    ca_cert = x509.load_pem_x509_certificate(ca.cert.read_bytes())
    ca_key = serialization.load_pem_private_key(ca.key.read_bytes(), password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    subject += [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(subject))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + _VALIDITY)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH]),
            critical=False,
        )
    )
    if hosts:
        builder = builder.add_extension(x509.SubjectAlternativeName([_san(host) for host in hosts]), critical=False)
    _write(pair, builder.sign(ca_key, hashes.SHA256()), key)
    return pair


def ensure_service_account_keys(directory: pathlib.Path) -> KeyPair:
    """The key pair kube-apiserver signs service-account tokens with (public half as `sa.pub`)."""
    pair = KeyPair(directory / "sa.pub", directory / "sa.key")
    if pair.cert.exists() and pair.key.exists():
        return pair
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pair.key.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    pair.key.chmod(0o600)
    pair.cert.write_bytes(
        key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return pair


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def _write(pair: KeyPair, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> None:
    pair.cert.parent.mkdir(parents=True, exist_ok=True)
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pair.key.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    pair.key.chmod(0o600)


def ensure_webhook_certificate(directory: pathlib.Path, hosts: tuple[str, ...]) -> KeyPair:
    """A development serving certificate `tls.crt`/`tls.key` for `hosts`, signed by a CA in the same folder.

    Kept as is when both files exist, so a certificate mounted by cert-manager is never replaced.
    """
    pair = KeyPair(directory / "tls.crt", directory / "tls.key")
    if pair.cert.exists() and pair.key.exists():
        return pair
    ca = ensure_ca(directory)
    return issue(ca, pair, common_name=hosts[0], hosts=hosts)
