"""Pure functions from the API models to what the operator creates: no I/O, no clients."""
