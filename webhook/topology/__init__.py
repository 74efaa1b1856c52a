"""The topology capability: the Topology objects and their catalog (:mod:`~webhook.topology.objects`),
inference of a topology from node labels (:mod:`~webhook.topology.infer`) and its export as KAI or
Kueue Topology objects (:mod:`~webhook.topology.export`). Pure (DESIGN.md §10)."""
