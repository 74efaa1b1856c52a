"""The placement engine alone (DESIGN.md §8): its model, the cluster index, eligibility, demand,
counting, choosing, assignment, verification, explanation, the shortfall and the capacity ledger
(:mod:`~webhook.placement.occupancy`). Pure: no flask, no kubernetes import; it knows neither
admission nor planning (setup.cfg contracts)."""
