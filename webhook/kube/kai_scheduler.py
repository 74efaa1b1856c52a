"""The ``kai.scheduler/*`` keys (KAI Scheduler, kai-scheduler/KAI-Scheduler at d5bc503): the
placement keys users write (DESIGN.md §2), the keys the webhook writes on templates and pods
(§2, §7), and every key KAI itself reads or writes (never flagged as misspelled or unknown, §5).
"""

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
POLICY_LEADER_WORKER = "LeaderWorker"
POLICY_LEADER_EXCLUDED = "LeaderExcluded"
LEADER_POLICIES = (POLICY_LEADER_WORKER, POLICY_LEADER_EXCLUDED)

# --- the Topology API ---------------------------------------------------------------------
#: apiVersion of KAI's Topology objects (read by the catalog, written by ``topology infer``).
TOPOLOGY_API_VERSION = "kai.scheduler/v1alpha1"

