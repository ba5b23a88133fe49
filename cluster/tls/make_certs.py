"""Make a CA and a certificate/key pair for the scheduler, workers and clients (TLS recipe).

    python cluster/tls/make_certs.py DIR [--host 127.0.0.1]

writes DIR/ca.pem, DIR/cert.pem, DIR/key.pem and prints the commands that start the cluster:
    dask scheduler --protocol tls --host HOST --port 8786 --dashboard-address 127.0.0.1:8787 \
        --tls-ca-file DIR/ca.pem --tls-cert DIR/cert.pem --tls-key DIR/key.pem
    dask worker tls://HOST:8786 --host WORKER_HOST --dashboard-address 127.0.0.1:0 \
        --tls-ca-file DIR/ca.pem --tls-cert DIR/cert.pem --tls-key DIR/key.pem
TLS covers the scheduler and worker ports only: the dashboards are plain, unauthenticated HTTP, so
they stay on 127.0.0.1 (reach the scheduler's through ``ssh -L 8787:127.0.0.1:8787 HOST``), and the
TLS ports listen on the interface given by --host.  Connect with
    daskgrad.connect("tls://HOST:8786", security=Security(tls_ca_file=..., tls_client_cert=...,
                     tls_client_key=..., require_encryption=True))
A client without these files is refused.  Needs the `tls` extra (cryptography).  One cert for all
roles keeps the recipe short; use one per role in production.
"""
import argparse
import datetime
import ipaddress
import os

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(cn):
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def make_certs(directory, host="127.0.0.1", days=7):
    os.makedirs(directory, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("daskgrad-ca")).issuer_name(_name("daskgrad-ca"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    try:
        alt = [x509.IPAddress(ipaddress.ip_address(host))]
    except ValueError:
        alt = [x509.DNSName(host)]
    cert = (x509.CertificateBuilder().subject_name(_name(host)).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(alt + [x509.DNSName("localhost")]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = {name: os.path.join(directory, f"{name}.pem") for name in ("ca", "cert", "key")}
    with open(paths["ca"], "wb") as f:
        f.write(ca.public_bytes(serialization.Encoding.PEM))
    with open(paths["cert"], "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(paths["key"], "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    os.chmod(paths["key"], 0o600)
    return paths


def _tls_args(paths):
    return ["--tls-ca-file", paths["ca"], "--tls-cert", paths["cert"], "--tls-key", paths["key"]]


def scheduler_command(paths, host="127.0.0.1", port=8786, dashboard="127.0.0.1:8787"):
    """The recipe's scheduler: TLS on ``host``, its plain-HTTP dashboard on the loopback."""
    return ["dask", "scheduler", "--protocol", "tls", "--host", host, "--port", str(port),
            "--dashboard-address", dashboard, *_tls_args(paths)]


def worker_command(paths, scheduler, host="127.0.0.1", dashboard="127.0.0.1:0"):
    """The recipe's worker: TLS on ``host``, its HTTP server on the loopback."""
    return ["dask", "worker", scheduler, "--host", host, "--dashboard-address", dashboard, *_tls_args(paths)]


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("directory")
    p.add_argument("--host", default="127.0.0.1")
    a = p.parse_args()
    paths = make_certs(a.directory, a.host)
    print(paths)
    print(" ".join(scheduler_command(paths, a.host)))
    print(" ".join(worker_command(paths, f"tls://{a.host}:8786", "WORKER_HOST")))
