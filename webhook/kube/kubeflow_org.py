"""The ``training.kubeflow.org/*`` pod labels (Kubeflow training-operator and mpi-operator).

Pods of the native kind (DistributedWorkload, this project's CRD) are labelled like the training
operator's (replica-type/index), so the pod rules of DESIGN.md §7 are the same for both.
"""

# --- upstream labels and annotations (Kubeflow training-operator) --------------------------
KF_REPLICA_TYPE = "training.kubeflow.org/replica-type"
KF_REPLICA_INDEX = "training.kubeflow.org/replica-index"
KF_JOB_NAME = "training.kubeflow.org/job-name"
KF_OPERATOR_NAME = "training.kubeflow.org/operator-name"
#: mpi-operator v2beta1 (``pkg/apis/kubeflow/v2beta1/constants.go``): ``launcher`` | ``worker``
KF_JOB_ROLE = "training.kubeflow.org/job-role"
