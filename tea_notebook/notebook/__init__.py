"""The notebook layer: magics, the live view and widgets. Only the IPython entry point imports it."""
