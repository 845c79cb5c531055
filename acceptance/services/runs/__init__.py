"""Runs on a worker, by what each step does.

- `state`: the one writer of a run's state, checked against `acceptance.run_states`
- `claiming`: taking a run for one attempt under a lease
- `reporting`: streaming output and progress into the run, and renewing the lease while it works
- `running`: preparing a runner stage's inputs and running the runner in the sandbox
- `finishing`: the verdict transaction, the run's evidence, and what follows it
- `execute`: `run_execute`, the entry point the Celery task calls
"""
