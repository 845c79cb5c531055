"""The parts of bench/soak_system.py: the processes it starts, the clients it runs, and its report."""
