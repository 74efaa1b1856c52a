"""Annotation and label keys read and written by the webhook (DESIGN.md §2, §7)."""

# --- read: user-facing keys (seed, DESIGN.md §2) -------------------------------------------
TOPOLOGY = "kai.scheduler/topology"
TOPOLOGY_REQUIRED = "kai.scheduler/topology-required-placement"
TOPOLOGY_PREFERRED = "kai.scheduler/topology-preferred-placement"
SEGMENT_SIZE = "kai.scheduler/segment-size"
SEGMENT_REQUIRED = "kai.scheduler/segment-topology-required-placement"
SEGMENT_PREFERRED = "kai.scheduler/segment-topology-preferred-placement"

# --- written on pod templates (DESIGN.md §2) -----------------------------------------------
SEGMENT_LEADER_POLICY = "kai.scheduler/segment-leader-policy"

# --- written on pods (DESIGN.md §2, §7) ----------------------------------------------------
SEGMENT_INDEX = "kai.scheduler/segment-index"
SUBGROUP_NAME = "kai.scheduler/subgroup-name"

#: Keys that belong to one segment (template value, else root value: DESIGN.md §4.2).
SEGMENT_KEYS = (SEGMENT_SIZE, SEGMENT_REQUIRED, SEGMENT_PREFERRED)
#: Keys that belong to the whole workload (read from the workload root).
WORKLOAD_PLACEMENT_KEYS = (TOPOLOGY_REQUIRED, TOPOLOGY_PREFERRED)

# --- upstream labels and annotations (Kubeflow training-operator, LWS) ---------------------
KF_REPLICA_TYPE = "training.kubeflow.org/replica-type"
KF_REPLICA_INDEX = "training.kubeflow.org/replica-index"
KF_JOB_NAME = "training.kubeflow.org/job-name"
KF_OPERATOR_NAME = "training.kubeflow.org/operator-name"

LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
LWS_SUBGROUP_SIZE = "leaderworkerset.sigs.k8s.io/subgroup-size"
LWS_SUBGROUP_INDEX = "leaderworkerset.sigs.k8s.io/subgroup-index"
LWS_SUBGROUP_POLICY_TYPE = "leaderworkerset.sigs.k8s.io/subgroup-policy-type"

# --- native DistributedWorkload pod labels (this project's CRD) ----------------------------
# Pods of the native kind are labelled like the training operator's (replica-type/index), so
# the pod rules of DESIGN.md §7 are the same for both.

POLICY_LEADER_WORKER = "LeaderWorker"
POLICY_LEADER_EXCLUDED = "LeaderExcluded"
LEADER_POLICIES = (POLICY_LEADER_WORKER, POLICY_LEADER_EXCLUDED)

#: Hard limit on the number of segments of one workload (DESIGN.md §5).
MAX_SEGMENTS = 10_000
#: Longest AdmissionResponse warning, in characters (DESIGN.md §5).
MAX_WARNING_CHARS = 120
