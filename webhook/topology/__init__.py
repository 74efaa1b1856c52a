"""webhook.topology."""
