"""The ``jobset.sigs.k8s.io/*`` keys (JobSet, ``api/jobset/v1alpha2/jobset_types.go``)."""

# --- JobSet (jobset ``api/jobset/v1alpha2/jobset_types.go``): labels AND annotations on pods ----
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
JOBSET_RJOB_NAME = "jobset.sigs.k8s.io/replicatedjob-name"
JOBSET_RJOB_REPLICAS = "jobset.sigs.k8s.io/replicatedjob-replicas"
JOBSET_JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOBSET_JOB_GLOBAL_INDEX = "jobset.sigs.k8s.io/job-global-index"
