"""webhook.planning."""
