"""The features: the table (features.table, read by the front door only) and each
feature's modules, its pure rules beside its I/O (docs/adding-a-feature.md)."""
