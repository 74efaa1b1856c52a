"""The ``ray.io/*`` pod labels (KubeRay, ``ray-operator/controllers/ray/utils/constant.go``)."""

# --- KubeRay (``ray-operator/controllers/ray/utils/constant.go``) ---------------------------
RAY_CLUSTER = "ray.io/cluster"
RAY_NODE_TYPE = "ray.io/node-type"
RAY_GROUP = "ray.io/group"
#: RayMultiHostIndexing (KubeRay >= 1.6): the replica's index in its worker group, and for
#: numOfHosts > 1 the host's index in its replica and the replica's unique name
RAY_REPLICA_INDEX = "ray.io/worker-group-replica-index"
RAY_HOST_INDEX = "ray.io/replica-host-index"
RAY_REPLICA_NAME = "ray.io/worker-group-replica-name"
