"""The stores: the storage seam (shared.storage) served by Cloud Storage, in memory, and
over several record buckets; open_store picks one for the settings."""
