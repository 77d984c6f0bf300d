"""What the farm's users see: ``farm doctor`` on their machine (GPUs and driver, installed wheels,
installed torch), a pure diagnosis over what was read, and nothing that needs a toolkit or torch."""
