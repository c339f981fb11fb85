"""Kubernetes: the MPIJob (Kubeflow MPI Operator, ``kubeflow.org/v2beta1``) that runs a
gcurun job, written from a profile (``gcurun k8s manifest``). Inside the launcher pod the
job's hosts come from the operator (:mod:`gcurun.hosts.mpi_operator`)."""
