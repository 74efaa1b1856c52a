"""The ``kueue.x-k8s.io/*`` names (Kueue): the Topology API version the ``kueue`` target writes
and the PodSet topology annotations (kubernetes-sigs/kueue, ``apis/kueue/v1beta2``, TAS).
"""

# Kueue's PodSet annotations (sigs.k8s.io/kueue v0.17.0 apis/kueue/v1beta2/topology_types.go).
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_UNCONSTRAINED = "kueue.x-k8s.io/podset-unconstrained-topology"
KUEUE_SLICE_REQUIRED = "kueue.x-k8s.io/podset-slice-required-topology"
KUEUE_SLICE_SIZE = "kueue.x-k8s.io/podset-slice-size"
KUEUE_SLICE_CONSTRAINTS = "kueue.x-k8s.io/podset-slice-required-topology-constraints"
KUEUE_GROUP_NAME = "kueue.x-k8s.io/podset-group-name"
#: Every Kueue TAS annotation of a PodSet: a user value of one of them must agree with ours.
KUEUE_TAS_KEYS: tuple[str, ...] = (KUEUE_REQUIRED, KUEUE_PREFERRED, KUEUE_UNCONSTRAINED, KUEUE_SLICE_REQUIRED,
                                   KUEUE_SLICE_SIZE, KUEUE_SLICE_CONSTRAINTS, KUEUE_GROUP_NAME)

#: Kueue's Topology: the bundled CRD (shared/crds/kueue.x-k8s.io_topologies.yaml) serves v1beta1
#: (deprecated) and v1beta2 (the storage version) with the same fields; we write v1beta2.
KUEUE_API_VERSION = "kueue.x-k8s.io/v1beta2"
KUEUE_GROUP = "kueue.x-k8s.io"
