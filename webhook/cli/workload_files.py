"""The workload files ``place``, ``place --what-if`` and ``capacity`` read: exactly one workload
object, and the Kubeflow training runtimes given with a TrainJob (:func:`load_workload`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from webhook.admission.kinds.trainingruntime import TRAINJOB, is_runtime, runtime_label
from webhook.planning.manifests import ManifestError, load_objects, object_source


@dataclass
class PlaceInput:
    """What the ``-f`` files hold: the one ``workload`` object and ``source``, where it was read;
    the training ``runtimes`` given with it (for a TrainJob) and, in the same order,
    ``runtime_sources``. A source is the file name followed by ``: document N`` (the
    :func:`webhook.planning.manifests.flatten` location) when the files hold more than one object, the file
    name alone for the one object of one file."""

    workload: dict[str, Any]
    source: str
    runtimes: list[dict[str, Any]] = field(default_factory=list)
    runtime_sources: list[str] = field(default_factory=list)

    def source_of(self, runtime: Any = None) -> str:
        """Where ``runtime`` (one of :attr:`runtimes`, the same object) was read; the workload's
        :attr:`source` for ``None``."""
        for given, source in zip(self.runtimes, self.runtime_sources):
            if given is runtime:
                return source
        return self.source


def load_workload(paths: str | list[str]) -> PlaceInput:
    """The objects of the files ``paths`` (each may be a multi-document file or a ``kind: List``,
    flattened as ``controller -f`` reads them): exactly one workload, plus any number of
    ClusterTrainingRuntime / TrainingRuntime documents when the workload is a TrainJob.

    Raises :class:`ManifestError` naming the file and the document: no workload or more than one
    (each one found listed by its document, and its file when there are several files), or a
    runtime given with a workload that is not a TrainJob (it would be ignored)."""
    paths = [paths] if isinstance(paths, str) else list(paths)
    located = [(path, location, dict(obj)) for path in paths for location, obj in load_objects(path)]
    sources = [object_source(path, location, len(located)) for path, location, _ in located]
    workloads = [(source, location, obj) for source, (_, location, obj) in zip(sources, located) if not is_runtime(obj)]
    runtimes = [(source, obj) for source, (_, _, obj) in zip(sources, located) if is_runtime(obj)]
    if len(workloads) != 1:
        where = paths[0] if len(paths) == 1 else ", ".join(paths)
        found = "; ".join(f"{location if len(paths) == 1 else source}: {obj.get('kind')} "
                          f"{(obj.get('metadata') or {}).get('name')}" for source, location, obj in workloads[:5])
        raise ManifestError(where, f"expected exactly one workload object, found {len(workloads)}"
                                   + (f" ({found}{' …' if len(workloads) > 5 else ''})" if len(workloads) > 1 else "")
                                   + "; fix: give one workload (a PyTorchJob, LeaderWorkerSet, JobSet, ... with "
                                     "its training runtime for a TrainJob) per command")
    source, _, workload = workloads[0]
    if runtimes and workload.get("kind") != TRAINJOB:
        rsource, runtime = runtimes[0]
        raise ManifestError(rsource, f"{runtime_label(runtime)}: a training runtime is read only with a TrainJob, "
                                     f"and the workload is a {workload.get('kind')}; fix: leave the runtime out")
    return PlaceInput(workload, source, [obj for _, obj in runtimes], [where for where, _ in runtimes])
