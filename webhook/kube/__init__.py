"""Kubernetes objects as this project reads them, below every capability package (the layers:
setup.cfg, docs/decisions/package-layout-by-capability.md).

One constants module per API group: :mod:`~webhook.kube.core` (the admission API, well-known
labels, the Job controller's labels, DNS-1123 names and label keys), :mod:`~webhook.kube.segments_dev`
(this project's keys and gate), :mod:`~webhook.kube.kai_scheduler`, :mod:`~webhook.kube.kueue`,
:mod:`~webhook.kube.kubeflow_org`, :mod:`~webhook.kube.jobset_sigs`, :mod:`~webhook.kube.ray_io`,
:mod:`~webhook.kube.leaderworkerset_sigs`. The one home of reading a Pod (:mod:`~webhook.kube.pods`:
identity, phase, node held, gate, gang size, requests), a Node (:mod:`~webhook.kube.nodes`) and a
resource quantity (:mod:`~webhook.kube.quantity`). Pure: no I/O, no Kubernetes client.
"""
