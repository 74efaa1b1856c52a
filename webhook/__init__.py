"""segment-webhook: segment-based topology-aware placement for Kubernetes training workloads.

Layout (see docs/ARCHITECTURE.md):

* ``webhook.core``      pure domain: resolution, validation, segment index arithmetic, JSONPatch.
* ``webhook.placement`` pure placement engine (DESIGN.md §8).
* ``webhook.http``      Flask/gunicorn adapter (AdmissionReview transport, TLS, metrics).
* ``webhook.cluster``   Kubernetes client adapter (live Topology cache).
* ``webhook.cli``       the ``segment-webhook`` command line.
"""

__version__ = "0.1.0"
