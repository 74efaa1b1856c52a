"""webhook.text."""
