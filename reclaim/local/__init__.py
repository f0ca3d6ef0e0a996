"""The local cloud: emulators, the launcher and the demo (no GCP account needed)."""
