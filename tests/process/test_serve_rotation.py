"""Serving-certificate rotation without restart (DESIGN.md §10: certificate rotation never fails a review).

Unit tests of CertificateReloader (plain files and the ``..data`` symlink swap of a Kubernetes
Secret volume), then a real `segment-webhook serve`: the files are replaced under the running
process while clients keep sending reviews; new handshakes must present the new certificate
(compared by SHA-256 fingerprint) and no request may fail during the swap.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import ssl
import threading
import time
import uuid

import pytest
import requests

from tests.support.serving import running_serve
from webhook.http import certs
from webhook.http.tls import CertificateLoadError, CertificateReloader


def fingerprint_of(bundle: certs.CertificateBundle) -> str:
    return certs.certificate_fingerprint(bundle.cert_pem)


# ------------------------------------------------------------------ CertificateReloader (unit)

def test_reloader_serves_tls12_minimum_and_reloads_changed_files(tmp_path):
    first, second = certs.generate(), certs.generate()
    certs.write_certificates(first, str(tmp_path))
    reloader = CertificateReloader(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    ctx = reloader.context()
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2
    assert reloader.fingerprint == fingerprint_of(first)
    assert reloader.context() is ctx  # unchanged files: same context, no reload
    certs.write_certificates(second, str(tmp_path))
    assert reloader.context() is not ctx
    assert reloader.fingerprint == fingerprint_of(second)


def test_reloader_keeps_previous_pair_when_new_pair_is_broken(tmp_path):
    first, second = certs.generate(), certs.generate()
    certs.write_certificates(first, str(tmp_path))
    reloader = CertificateReloader(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    ctx = reloader.context()
    (tmp_path / "tls.crt").write_bytes(second.cert_pem)  # key not yet replaced: mismatched pair
    assert reloader.context() is ctx
    assert reloader.fingerprint == fingerprint_of(first)
    (tmp_path / "tls.key").write_bytes(second.key_pem)   # pair complete: picked up
    assert reloader.context() is not ctx
    assert reloader.fingerprint == fingerprint_of(second)


def test_reloader_follows_secret_volume_symlink_swap(tmp_path):
    """kubelet updates a Secret volume by writing ..<timestamp>/ and swapping the ..data link."""
    first, second = certs.generate(), certs.generate()
    certs.write_certificates(first, str(tmp_path / "..v1"))
    os.symlink("..v1", tmp_path / "..data")
    for name in ("tls.crt", "tls.key"):
        os.symlink(os.path.join("..data", name), tmp_path / name)
    reloader = CertificateReloader(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    assert reloader.ready()
    assert reloader.fingerprint == fingerprint_of(first)
    certs.write_certificates(second, str(tmp_path / "..v2"))
    os.symlink("..v2", tmp_path / "..data_tmp")
    os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
    reloader.context()
    assert reloader.fingerprint == fingerprint_of(second)


def test_reloader_without_files_is_not_ready(tmp_path):
    reloader = CertificateReloader(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))
    assert reloader.ready() is False
    with pytest.raises(CertificateLoadError) as info:
        reloader.load()
    assert "tls.crt" in str(info.value)


# ------------------------------------------------------------------ a running server

def served_fingerprint(port: int) -> str:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="localhost") as tls:
            der = tls.getpeercert(binary_form=True)
            assert der is not None  # the server presents a certificate
            return hashlib.sha256(der).hexdigest()


@pytest.fixture(scope="module")
def rotating_server(tmp_path_factory):
    base = tmp_path_factory.mktemp("rotation")
    cert_dir = base / "certs"
    first, second = certs.generate(), certs.generate()
    certs.write_certificates(first, str(cert_dir))
    both_cas = base / "both-cas.pem"
    both_cas.write_bytes(first.ca_pem + second.ca_pem)
    with running_serve(base, ca=str(both_cas)) as srv:
        yield {"url": srv["url"], "port": srv["port"], "dir": cert_dir, "first": first, "second": second,
               "both_cas": str(both_cas), "proc": srv["proc"], "log": srv["log"]}


def _review_doc() -> str:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": str(uuid.uuid4()), "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "operation": "CREATE", "object": pod}})


def test_rotation_new_handshakes_get_new_certificate_and_no_request_fails(rotating_server):
    srv = rotating_server
    assert served_fingerprint(srv["port"]) == fingerprint_of(srv["first"])
    stop = threading.Event()
    results: dict = {"ok": 0, "failed": []}
    lock = threading.Lock()

    def new_connections():
        while not stop.is_set():
            try:  # a new TCP + TLS connection per request
                resp = requests.post(srv["url"] + "/mutate", data=_review_doc(), verify=srv["both_cas"],
                                     headers={"Content-Type": "application/json", "Connection": "close"}, timeout=10)
                good = resp.status_code == 200 and resp.json()["response"]["allowed"] is True
                failure = None if good else repr(resp)
            except requests.RequestException as exc:
                failure = repr(exc)
            with lock:
                if failure is None:
                    results["ok"] += 1
                else:
                    results["failed"].append(failure)

    def keep_alive():
        with requests.Session() as session:  # one connection opened before the swap
            while not stop.is_set():
                try:
                    resp = session.post(srv["url"] + "/mutate", data=_review_doc(), verify=srv["both_cas"],
                                        headers={"Content-Type": "application/json"}, timeout=10)
                    failure = None if resp.status_code == 200 else repr(resp)
                except requests.RequestException as exc:
                    failure = repr(exc)
                with lock:
                    if failure is None:
                        results["ok"] += 1
                    else:
                        results["failed"].append(failure)

    threads = [threading.Thread(target=new_connections) for _ in range(3)] + [threading.Thread(target=keep_alive)]
    for t in threads:
        t.start()
    try:
        time.sleep(0.3)
        certs.write_certificates(srv["second"], str(srv["dir"]))  # the rotation
        new_fp = fingerprint_of(srv["second"])
        deadline = time.monotonic() + 15
        seen = served_fingerprint(srv["port"])
        while seen != new_fp and time.monotonic() < deadline:
            time.sleep(0.05)
            seen = served_fingerprint(srv["port"])
        with lock:
            ok_at_swap = results["ok"]
        time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert seen == new_fp
    assert results["failed"] == []
    assert results["ok"] > ok_at_swap > 0
    # every worker now presents the new certificate: several fresh handshakes
    assert {served_fingerprint(srv["port"]) for _ in range(8)} == {new_fp}
    # and a client that trusts only the new CA verifies it
    new_ca = srv["dir"] / "ca.crt"
    assert requests.get(srv["url"] + "/readyz", verify=str(new_ca), timeout=10).status_code == 200
    assert srv["proc"].poll() is None


#: ``[2026-12-01 07:28:42 +0000] [17889] [LEVEL] segment_webhook.server: ...``: time, pid, level, logger.
LOG_LINE = r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d [+-]\d{4}\] \[\d+\] \[%s\] segment_webhook\.server: %s"


def wait_for_log_line(path, pattern: str, bound_s: float = 20.0) -> str:
    end = time.monotonic() + bound_s
    while True:
        found = re.search(pattern, path.read_text(errors="replace"), re.M)
        if found:
            return found.group(0)
        assert time.monotonic() < end, f"no line matching {pattern!r} in the server log"
        time.sleep(0.1)


def test_reload_and_reload_failure_are_logged_with_time_and_level(rotating_server):
    srv = rotating_server
    third, fourth = certs.generate(), certs.generate()
    # a certificate with the key of another pair: logged, the previous pair stays in use
    (srv["dir"] / "tls.crt").write_bytes(third.cert_pem)
    (srv["dir"] / "tls.key").write_bytes(fourth.key_pem)
    previous = served_fingerprint(srv["port"])
    assert previous != fingerprint_of(third)
    wait_for_log_line(srv["log"], LOG_LINE % ("WARNING", r"cannot load the serving certificate .*tls\.crt.*"
                                              r"still serving the previous certificate"))
    # a good pair: reloaded, and the INFO line names the file and the new fingerprint
    certs.write_certificates(third, str(srv["dir"]))
    assert served_fingerprint(srv["port"]) == fingerprint_of(third)
    wait_for_log_line(srv["log"], LOG_LINE % ("INFO", "serving certificate reloaded from .*tls\\.crt "
                                              rf"\(sha256 {fingerprint_of(third)}\)"))
