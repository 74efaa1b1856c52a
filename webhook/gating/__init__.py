"""webhook.gating."""
