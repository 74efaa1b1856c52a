"""Entry point of the domain core: one AdmissionReview ``request`` in, one :class:`Decision` out.

Transport-free: the HTTP adapter (``webhook.http``) and the offline dry run
(``segment-webhook review``) both call :func:`review`, so they share one code path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.admission.config import AdmissionSettings
from webhook.admission.kinds import dispatch
from webhook.admission.types import AdmissionRequest
from webhook.admission.verdict import Decision
from webhook.topology.objects import TopologyCatalog


def review(
    request: AdmissionRequest | Mapping[str, Any],
    catalog: TopologyCatalog,
    settings: AdmissionSettings,
    *,
    mutate: bool = True,
) -> Decision:
    """Admit one AdmissionReview v1 ``request`` (the ``request`` member, as a dict). The core's one
    entry point, an :class:`~webhook.admission.types.AdmissionHandler`.

    Dispatches on ``request.kind`` (group/version/kind) to the handler of that workload kind
    (``webhook.admission.kinds.*``). ``mutate=False`` runs the same checks without building a patch
    (the ``/validate`` endpoint). Kinds the webhook does not handle are allowed unchanged.

    A malformed object yields a denied Decision with code 400 naming the field; it does not
    raise for user input (checked by the hypothesis tests). An exception would be a bug here,
    and the transport turns it into a visible denial with code 500 (DESIGN.md §5: never HTTP 5xx).
    """

    return dispatch(request, catalog, settings, mutate=mutate)
