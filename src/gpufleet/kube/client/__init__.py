"""The port over the Kubernetes API (:mod:`.port`), its lightkube adapter and the fast calls."""
