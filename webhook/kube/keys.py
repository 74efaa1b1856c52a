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

#: Written on the worker template of a workload whose owner chain KAI's pod-grouper cannot group
#: (DESIGN.md §4.5; the native kind: KAI d5bc503 has no plugin for ``segments.dev``, its default
#: grouper makes one flat PodGroup): its pods get ``segment-index`` but never ``subgroup-name``.
KAI_FLAT_GANG = "segments.dev/kai-flat-gang"

# --- written on pods (DESIGN.md §2, §7) ----------------------------------------------------
SEGMENT_INDEX = "kai.scheduler/segment-index"
SUBGROUP_NAME = "kai.scheduler/subgroup-name"

#: Keys that belong to one segment (template value, else root value: DESIGN.md §4.2).
SEGMENT_KEYS = (SEGMENT_SIZE, SEGMENT_REQUIRED, SEGMENT_PREFERRED)
#: Keys that belong to the whole workload (read from the workload root).
WORKLOAD_PLACEMENT_KEYS = (TOPOLOGY_REQUIRED, TOPOLOGY_PREFERRED)
#: The six user-facing placement keys of DESIGN.md §2 (misspellings of these are denied, §5).
PLACEMENT_KEYS = (TOPOLOGY, TOPOLOGY_REQUIRED, TOPOLOGY_PREFERRED, SEGMENT_SIZE, SEGMENT_REQUIRED, SEGMENT_PREFERRED)
#: Annotation keys that make a PyTorchJob / LeaderWorkerSet the webhook's (DESIGN.md §5 "Opt-in"):
#: the placement keys and the key the webhook writes on templates.
OPT_IN_KEYS = PLACEMENT_KEYS + (SEGMENT_LEADER_POLICY,)

KAI_PREFIX = "kai.scheduler/"
#: Every ``kai.scheduler/`` key KAI Scheduler reads or writes (kai-scheduler/KAI-Scheduler at d5bc503:
#: the string constants of its non-test Go sources, e.g. ``pkg/common/constants/constants.go``,
#: ``pkg/podgrouper/podgrouper/plugins/constants/constants.go``,
#: ``pkg/scheduler/constants/labels/labels.go``). Never flagged as misspelled or unknown (§5).
KAI_KEYS = frozenset(KAI_PREFIX + name for name in (
    "topology", "topology-required-placement", "topology-preferred-placement",
    "segment-size", "segment-topology-required-placement", "segment-topology-preferred-placement",
    "subgroup-name", "queue", "node-pool", "preemptibility", "preemption-delay", "task-priority",
    "batch-min-member", "skip-podgrouper", "top-owner-metadata", "staleness-grace-period",
    "last-start-timestamp", "last-eviction-timestamp", "stale-podgroup-timestamp",
    "numa-placement-predicted", "numa-placement-observed", "accounting",
))
#: Keys this webhook writes (DESIGN.md §2); never flagged either.
WEBHOOK_KEYS = frozenset((SEGMENT_LEADER_POLICY, SEGMENT_INDEX, SUBGROUP_NAME))
#: Largest edit distance at which an unknown key counts as a misspelling of a placement key (§5).
MISSPELLING_DISTANCE = 3

# --- Kubernetes well-known node labels (kubernetes.io docs, "Well-Known Labels") ------------
#: The node's name as a label: the lowest topology level, and the label the controller pins a
#: released pod to (``spec.nodeSelector``).
HOSTNAME = "kubernetes.io/hostname"
#: The node's zone label.
ZONE = "topology.kubernetes.io/zone"

# --- upstream labels and annotations (Kubeflow training-operator, LWS) ---------------------
KF_REPLICA_TYPE = "training.kubeflow.org/replica-type"
KF_REPLICA_INDEX = "training.kubeflow.org/replica-index"
KF_JOB_NAME = "training.kubeflow.org/job-name"
KF_OPERATOR_NAME = "training.kubeflow.org/operator-name"
#: mpi-operator v2beta1 (``pkg/apis/kubeflow/v2beta1/constants.go``): ``launcher`` | ``worker``
KF_JOB_ROLE = "training.kubeflow.org/job-role"

# --- JobSet (jobset ``api/jobset/v1alpha2/jobset_types.go``): labels AND annotations on pods ----
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_RJOB_NAME = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_RJOB_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOBSET_JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"

# --- KubeRay (``ray-operator/controllers/ray/utils/constant.go``) ---------------------------
RAY_CLUSTER = "ray.io/cluster"
RAY_NODE_TYPE = "ray.io/node-type"
RAY_GROUP = "ray.io/group"
#: RayMultiHostIndexing (KubeRay >= 1.6): the replica's index in its worker group, and for
#: numOfHosts > 1 the host's index in its replica and the replica's unique name
RAY_REPLICA_INDEX = "ray.io/worker-group-replica-index"
RAY_HOST_INDEX = "ray.io/replica-host-index"
RAY_REPLICA_NAME = "ray.io/worker-group-replica-name"

# --- the Job controller's pod labels (Kubernetes batch/v1) ---------------------------------
BATCH_JOB_NAME = "batch.kubernetes.io/job-name"
JOB_NAME = "job-name"
#: an Indexed Job's pod index: annotation since Kubernetes 1.24, label since 1.28
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"

LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
LWS_SUBGROUP_SIZE = "leaderworkerset.sigs.k8s.io/subgroup-size"
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
