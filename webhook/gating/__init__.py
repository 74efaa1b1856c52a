"""The gang capability of the controller, pure (DESIGN.md §9): the per-gang decision
(:mod:`~webhook.gating.decision`), the reconcile of one gang (:mod:`~webhook.gating.reconcile`) and
the release patch of a gated pod (:mod:`~webhook.gating.release`). The controller's I/O (informers,
patches, Events, Leases) stays in :mod:`webhook.controller`."""
