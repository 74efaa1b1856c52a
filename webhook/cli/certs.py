"""``segment-webhook certs``: generate a CA and the webhook's serving certificate.

Every flag can also be set with ``SEGMENT_WEBHOOK_<FLAG>`` (:mod:`webhook.cli.flags`).
"""

from __future__ import annotations

import argparse
from typing import Any

from webhook.cli.flags import DEFAULT_CERT_DIR, UsageError, add_env_flag, apply_env, env_note, error, positive_int


def run(args: argparse.Namespace) -> int:
    """The ``certs`` command: exit 0 written, 2 bad flag or unwritable directory."""
    from webhook.http import certs

    try:
        apply_env(args)
        bundle = certs.generate(args.service, args.namespace, args.days)
        paths = certs.write_certificates(bundle, args.out)
    except (UsageError, certs.CertificateError) as exc:
        return error("certs", str(exc))
    print(f"wrote {paths['ca']}, {paths['cert']}, {paths['key']} (subjectAltNames: "
          f"{', '.join(bundle.dns_names + bundle.ip_addresses)}; valid {args.days} days)")
    return 0


def register(subparsers: Any) -> None:
    """Add ``certs`` to the ``segment-webhook`` command line."""
    from webhook.http.certs import DEFAULT_DAYS, DEFAULT_NAMESPACE, DEFAULT_SERVICE

    certs_parser = subparsers.add_parser(
        "certs",
        help="generate a CA and the webhook's serving certificate",
        description="Write ca.crt (for the webhook configuration's caBundle), tls.crt and tls.key (0600) into "
                    "--out. The serving certificate covers NAME, NAME.NS, NAME.NS.svc, NAME.NS.svc.cluster.local, "
                    "localhost and 127.0.0.1. " + env_note("SEGMENT_WEBHOOK_OUT"),
    )
    add_env_flag(certs_parser, "--out", default=DEFAULT_CERT_DIR, metavar="DIR", help="output directory")
    add_env_flag(certs_parser, "--service", default=DEFAULT_SERVICE, metavar="NAME", help="Service name")
    add_env_flag(certs_parser, "--namespace", default=DEFAULT_NAMESPACE, metavar="NS", help="Service namespace")
    add_env_flag(certs_parser, "--days", default=DEFAULT_DAYS, type=positive_int(3650), metavar="N",
                 help="validity of the CA and serving certificate in days, 1..3650")
    certs_parser.set_defaults(func=run)
