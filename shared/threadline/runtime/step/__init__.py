"""One step of a run: the loop, its ports, its state, its tools and child runs."""
