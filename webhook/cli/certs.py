"""``segment-webhook certs``: the webhook's serving certificate, signed by the CA kept in ``--out``
(a new CA the first time, or with ``--new-ca``; DESIGN.md §10, :func:`webhook.http.certs.renew`).

Every flag can also be set with ``SEGMENT_WEBHOOK_<FLAG>`` (:mod:`webhook.cli.flags`).
"""

from __future__ import annotations

import argparse
from typing import Any

from webhook.cli.flags import (
    DEFAULT_CERT_DIR,
    add_env_flag,
    apply_env,
    check_not_a_file,
    check_writable_directory,
    env_name,
    env_note,
    positive_int,
)


def run(args: argparse.Namespace) -> int:
    """The ``certs`` command: exit 0 written; a bad flag or an unwritable directory (checked before
    writing: :func:`~webhook.cli.flags.check_writable_directory`) raises :class:`~webhook.cli.flags.UsageError`
    / :class:`~webhook.http.certs.CertificateError` (exit 2, printed by :func:`webhook.cli.main`)."""
    from webhook.http import certs

    apply_env(args)
    out_dir = {"directory": args.out, "flag": "--out",
                   "writes": f"{certs.CERT_FILE}, {certs.KEY_FILE}, {certs.CA_FILE}, {certs.CA_KEY_FILE} and "
                          f"{certs.CA_BUNDLE_FILE}",
                   "fix": f"set --out ({env_name('--out')}) to a directory you can write"}
    check_not_a_file(**out_dir)  # before the CA kept there is read
    bundle = certs.renew(args.out, args.service, args.namespace, args.days, new_ca=args.new_ca)
    check_writable_directory(**out_dir)  # after every check of the flags: a bad one leaves no directory behind
    paths = certs.write_certificates(bundle, args.out)
    ca_note = ("kept the CA in " + paths["ca"] if bundle.reused_ca
               else f"made a new CA ({certs.CA_DAYS} days) in {paths['ca']} and {paths['ca_key']}")
    bundle_note = ("the new CA and the CA it replaces: keep both until the rollout finished"
                   if bundle.ca_bundle_pem != bundle.ca_pem else "the CA")
    print(f"wrote {paths['cert']}, {paths['key']} (subjectAltNames: "
          f"{', '.join(bundle.dns_names + bundle.ip_addresses)}; valid {args.days} days); {ca_note}; "
          f"caBundle: {paths['ca_bundle']} ({bundle_note})")
    return 0


def register(subparsers: Any) -> None:
    """Add ``certs`` to the ``segment-webhook`` command line."""
    from webhook.http.certs import DEFAULT_DAYS, DEFAULT_NAMESPACE, DEFAULT_SERVICE

    certs_parser = subparsers.add_parser(
        "certs",
        help="generate a CA and the webhook's serving certificate",
        description="Write tls.crt and tls.key (0600) into --out, signed by the CA kept there (ca.crt, ca.key "
                    "0600); the first run, or --new-ca, makes a new CA. ca-bundle.crt is the webhook "
                    "configuration's caBundle: the CA, and after --new-ca also the CA it replaced, until the next "
                    "run. The serving certificate covers NAME, NAME.NS, NAME.NS.svc, NAME.NS.svc.cluster.local, "
                    "localhost and 127.0.0.1. " + env_note("SEGMENT_WEBHOOK_OUT"),
    )
    add_env_flag(certs_parser, "--out", default=DEFAULT_CERT_DIR, metavar="DIR", help="output directory")
    add_env_flag(certs_parser, "--service", default=DEFAULT_SERVICE, metavar="NAME", help="Service name")
    add_env_flag(certs_parser, "--namespace", default=DEFAULT_NAMESPACE, metavar="NS", help="Service namespace")
    add_env_flag(certs_parser, "--days", default=DEFAULT_DAYS, type=positive_int(3650), metavar="N",
                 help="validity of the serving certificate in days, 1..3650 (a new CA: 3650 days)")
    certs_parser.add_argument(
        "--new-ca", action="store_true",
        help="make a new CA instead of reusing the one in --out; ca-bundle.crt then holds the new and the old CA "
             "(apply it, wait for the rollout, then run certs again without --new-ca to drop the old CA)")
    certs_parser.set_defaults(func=run)
