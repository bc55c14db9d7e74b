"""The admission webhook: the review, the pod mutation, its annotations and the HTTPS server."""
