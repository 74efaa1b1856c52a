"""Cluster adapters: code that talks to a Kubernetes API server (``kubernetes`` client).

The capability packages (``webhook.admission``, ``webhook.placement``, ...) never import this package; they see the cluster only
through the :class:`webhook.topology.objects.TopologyCatalog` protocol, which
:class:`webhook.cluster.topology_cache.LiveTopologyCatalog` implements.
"""
