"""The ``segments.dev/*`` keys: this project's own API group (labels, annotations, the scheduling
gate), each with the rule that writes or reads it (DESIGN.md §2, §9).

One home for every key of the group; the other groups have theirs beside it
(:mod:`webhook.kube.kai_scheduler`, :mod:`webhook.kube.kueue`, :mod:`webhook.kube.core`).
"""

#: The scheduling gate the webhook adds and the controller removes (DESIGN.md §9).
GATE = "segments.dev/placement"
#: Pod template / pod annotation: number of pods of the pod's gang.
GANG_SIZE = "segments.dev/gang-size"
#: Pod template / pod annotations: the workload's topology name and workload-level levels.
GANG_TOPOLOGY = "segments.dev/topology"
GANG_REQUIRED = "segments.dev/topology-required-placement"
GANG_PREFERRED = "segments.dev/topology-preferred-placement"
#: Pod template / pod annotation: the segment required level as a node label, written beside the
#: gang facts only when the template's ``kai.scheduler/segment-topology-required-placement`` names
#: it by a KAI level alias (the Workload API objects need the node label; DESIGN.md §5).
GANG_SEGMENT_REQUIRED = "segments.dev/segment-topology-required-placement"
#: Pod template / pod annotation: ``workload`` when the gang is the whole object (a JobSet or Ray
#: cluster whose root sets a workload level: KAI makes one PodGroup of it, DESIGN.md §4.5, §9)
GANG_SCOPE = "segments.dev/gang-scope"
#: The value of :data:`GANG_SCOPE` that makes the whole object one gang.
WHOLE_WORKLOAD = "workload"
#: Every annotation this module writes on templates; a pod carrying one belongs to a gang.
GANG_KEYS = (GANG_SIZE, GANG_TOPOLOGY, GANG_REQUIRED, GANG_PREFERRED, GANG_SCOPE, GANG_SEGMENT_REQUIRED)

#: Written on the worker template of a workload whose owner chain KAI's pod-grouper cannot group
#: (DESIGN.md §4.5; the native kind: KAI d5bc503 has no plugin for ``segments.dev``, its default
#: grouper makes one flat PodGroup): its pods get ``segment-index`` but never ``subgroup-name``.
KAI_FLAT_GANG = "segments.dev/kai-flat-gang"

#: The annotation on a gang's top owner workload holding its gangs' state lines.
GANG_STATE = "segments.dev/gang-state"

#: the pod template annotation the webhook writes: the worker group's numOfHosts (§3b)
NUM_OF_HOSTS = "segments.dev/num-of-hosts"

#: the pod template annotation the webhook writes: the replicatedJob's Job parallelism (§3b)
JOB_PARALLELISM = "segments.dev/job-parallelism"
#: root annotation naming a TrainJob's trainer replicatedJob (``node`` when absent on a TrainJob);
#: on a JobSet root (Trainer v2.0/v2.1 copy a TrainJob's ``spec.annotations`` there) the root's keys
#: are inherited by that replicatedJob alone (DESIGN.md §3b)
TRAINER_JOB = "segments.dev/trainer-job"

#: the ``spec.runtimePatches`` entry the webhook owns (the list is keyed by ``manager``)
MANAGER = "segments.dev/segment-webhook"

#: The label (workload root) and template annotation that name the target.
TARGET_KEY = "segments.dev/target"
