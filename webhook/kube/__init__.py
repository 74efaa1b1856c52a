"""webhook.kube."""
