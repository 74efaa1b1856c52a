"""Kubernetes core names: the admission API (``admission.k8s.io/v1``: apiVersion, kind,
operations), the well-known node labels (kubernetes.io docs, "Well-Known Labels"), the Job
controller's pod labels (``batch/v1``) and the DNS-1123 subdomain form of object names.
"""

from __future__ import annotations

import re
from typing import TypeGuard

# --- the admission API (k8s.io/api/admission/v1) ---------------------------------------------
ADMISSION_API_VERSION = "admission.k8s.io/v1"

ADMISSION_KIND = "AdmissionReview"
#: Operations of an AdmissionReview v1 request (``admission/v1.Operation``).
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
#: Operations that carry ``request.object`` (and, for UPDATE, ``request.oldObject``).
OBJECT_OPERATIONS = ("CREATE", "UPDATE")

# --- object fields (k8s.io/apimachinery meta/v1 ObjectMeta, TypeMeta) --------------------------
#: The fields of an ObjectMeta (``metadata``): none of them is a misspelling of another.
OBJECT_META_FIELDS = frozenset({
    "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
    "ownerReferences", "finalizers", "managedFields"})
#: The top-level fields of an object or a pod template (TypeMeta, metadata, spec, status).
OBJECT_FIELDS = frozenset({"apiVersion", "kind", "metadata", "spec", "status"})

# --- Kubernetes well-known node labels (kubernetes.io docs, "Well-Known Labels") ------------
#: The node's name as a label: the lowest topology level, and the label the controller pins a
#: released pod to (``spec.nodeSelector``).
HOSTNAME = "kubernetes.io/hostname"
#: The node's zone label.
ZONE = "topology.kubernetes.io/zone"

# --- the Job controller's pod labels (Kubernetes batch/v1) ---------------------------------
BATCH_JOB_NAME = "batch.kubernetes.io/job-name"
JOB_NAME = "job-name"
#: an Indexed Job's pod index: annotation since Kubernetes 1.24, label since 1.28
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

# --- names (Kubernetes apimachinery validation) ---------------------------------------------
_NAME_PART = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_DNS_SUBDOMAIN = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
_LABEL_KEY_RE = re.compile(rf"^(({_DNS_SUBDOMAIN})/)?{_NAME_PART}$")
_DNS_SUBDOMAIN_RE = re.compile(_DNS_SUBDOMAIN)


def is_valid_label_key(key: object) -> TypeGuard[str]:
    """True when ``key`` is a valid Kubernetes label key (``[prefix/]name``).

    Rule source: Kubernetes apimachinery ``IsQualifiedName``: the name part is at most 63
    characters of ``[A-Za-z0-9-_.]`` starting and ending alphanumeric; the optional prefix is a
    DNS-1123 subdomain of at most 253 characters.
    """
    if not isinstance(key, str) or not key or len(key) > 253 + 1 + 63:
        return False
    if not _LABEL_KEY_RE.match(key):
        return False
    prefix, _, name = key.rpartition("/")
    return len(name) <= 63 and len(prefix) <= 253


def is_dns_subdomain(name: object) -> bool:
    """True when ``name`` is a Kubernetes object name: a lowercase DNS-1123 subdomain of at most
    253 characters (Kubernetes apimachinery ``IsDNS1123Subdomain``)."""
    return isinstance(name, str) and len(name) <= 253 and _DNS_SUBDOMAIN_RE.fullmatch(name) is not None
