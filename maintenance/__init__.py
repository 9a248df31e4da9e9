"""Scheduled maintenance of segment logs, the daemon and the recovery command."""
