"""The ``leaderworkerset.sigs.k8s.io/*`` pod labels and annotations (LeaderWorkerSet)."""

# --- LeaderWorkerSet (lws ``api/leaderworkerset/v1/leaderworkerset_types.go``) ---------------------
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
LWS_SIZE = "leaderworkerset.sigs.k8s.io/size"
LWS_SUBGROUP_SIZE = "leaderworkerset.sigs.k8s.io/subgroup-size"
LWS_SUBGROUP_POLICY_TYPE = "leaderworkerset.sigs.k8s.io/subgroup-policy-type"
