"""The vendor app's browser pages: the audit log, notification preferences, webhooks."""
