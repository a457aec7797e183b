"""The TEA protocol: records, one generic versioned registry (TCP, ECP, ACP), retrieval,
transformations and the tool manifest."""
