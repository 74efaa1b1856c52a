"""Old home of :class:`Decision`, :class:`Violation` and :class:`AdmissionSettings`, kept only so
branches written against it still import after a merge; new code imports
:mod:`webhook.core.admission_decision` and :mod:`webhook.core.settings`. Delete once nothing
imports it (``grep -rn webhook.core.decision``); ``tests/test_layout.py`` fences new users."""

from webhook.core.admission_decision import Decision, Violation  # noqa: F401
from webhook.core.settings import AdmissionSettings  # noqa: F401
