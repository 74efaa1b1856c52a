"""The admission capability (DESIGN.md §2-§7): one AdmissionReview request in, one
:class:`~webhook.admission.verdict.Decision` out (:func:`webhook.admission.review.review`), through the
per-kind readers (:mod:`webhook.admission.kinds`), the rules, warnings, resolution, automatic
defaults, targets, the Workload API objects and the gate written at CREATE
(:mod:`~webhook.admission.gate`). Transport-free and pure: the HTTP adapter and the offline
``review`` command call the same code."""
