"""segment-webhook: segment-based topology-aware placement for Kubernetes training workloads.

Layout (see docs/concepts/ARCHITECTURE.md):

* ``webhook.text``, ``webhook.kube``  the lowest: message/YAML helpers; Kubernetes names and the
  one reader of a Pod, a Node, a quantity.
* ``webhook.topology``  Topology objects, inference, export.
* ``webhook.admission`` the admission review: rules, warnings, kinds, targets (DESIGN.md §2-§7).
* ``webhook.placement`` the placement engine alone (DESIGN.md §8).
* ``webhook.gating``    the controller's pure gang decision, reconcile and release (DESIGN.md §9).
* ``webhook.planning``  snapshot, expansion, what-if, capacity, freeing, gen-cluster, svg.
* ``webhook.http``      Flask/gunicorn adapter (AdmissionReview transport, TLS, metrics).
* ``webhook.cluster``   Kubernetes client adapter (live Topology cache).
* ``webhook.controller`` the gang controller's runtime (informers, work queue, patches, Events, Lease).
* ``webhook.cli``       the ``segment-webhook`` command line.
"""

__version__ = "0.1.0"
