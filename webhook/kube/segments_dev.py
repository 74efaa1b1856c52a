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
