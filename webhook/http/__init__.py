"""HTTP adapter: AdmissionReview transport (``envelope``), Flask app (``app``), gunicorn server with
TLS rotation and graceful shutdown (``server``), certificates (``certs``), metrics and the JSON
review log (``metrics``), and the ``serve``/``certs`` sub-commands (``commands``).

Importing this package does not import Flask, gunicorn or prometheus_client; the modules do.
"""
