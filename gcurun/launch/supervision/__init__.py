"""Supervision of a running job: ``supervise`` (one loop over every executor's events:
the first failure stops the job), ``output`` (rank prefixes, log files, stderr tails) and
``stopping`` (process groups: SIGTERM, a deadline, SIGKILL).
"""
