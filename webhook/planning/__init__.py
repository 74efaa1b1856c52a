"""Planning around the engine (DESIGN.md §8, §13): reading cluster dumps
(:mod:`~webhook.planning.snapshot`, :mod:`~webhook.planning.manifests`), expanding a workload into
pods through admission (:mod:`~webhook.planning.expand`), the ``place`` pipeline, what-if, capacity,
freeing nodes, synthetic clusters (:mod:`~webhook.planning.gencluster`) and the SVG drawing. Pure:
no Kubernetes client; files are read only by the manifests reader."""
