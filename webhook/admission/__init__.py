"""webhook.admission."""
