"""A throwaway certificate authority for the test API server's TLS port.

A real API server speaks TLS: in-cluster clients trust it through the service account's ca.crt and
certificate kubeconfigs authenticate with a client certificate the cluster's CA signed. This makes
both, with `cryptography` (a test extra): a CA, a
server certificate for 127.0.0.1/localhost and a client certificate whose CN is the user name.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    ca_cert: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    client_user: str


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _write(path: str, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return path


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _issue(subject: str, issuer: x509.Name, issuer_key: ec.EllipticCurvePrivateKey, key: ec.EllipticCurvePrivateKey,
           *, ca: bool = False, usage: ExtendedKeyUsageOID | None = None, san: list | None = None) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (x509.CertificateBuilder().subject_name(_name(subject)).issuer_name(issuer)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
               .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    if ca:
        builder = builder.add_extension(x509.KeyUsage(
            digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
            key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
            decipher_only=False), critical=True)
        builder = builder.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    else:
        builder = builder.add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()),
                                        critical=False)
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if san:
        builder = builder.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def make_pki(directory: str | os.PathLike, client_user: str = "test-user") -> Pki:
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue("streamjob-test-ca", _name("streamjob-test-ca"), ca_key, ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _issue("kube-apiserver", ca.subject, ca_key, server_key, usage=ExtendedKeyUsageOID.SERVER_AUTH,
                    san=[x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")])
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _issue(client_user, ca.subject, ca_key, client_key, usage=ExtendedKeyUsageOID.CLIENT_AUTH)
    pem = serialization.Encoding.PEM
    return Pki(ca_cert=_write(f"{directory}/ca.crt", ca.public_bytes(pem)),
               server_cert=_write(f"{directory}/server.crt", server.public_bytes(pem)),
               server_key=_write(f"{directory}/server.key", _key_pem(server_key)),
               client_cert=_write(f"{directory}/client.crt", client.public_bytes(pem)),
               client_key=_write(f"{directory}/client.key", _key_pem(client_key)),
               client_user=client_user)
