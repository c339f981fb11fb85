"""Elastic jobs (Horovod Elastic's model): a driver that polls a host discovery script,
blacklists failed hosts and re-forms the job in generations; surviving ranks are not
restarted, they re-initialise in their own process and receive a new rank and size.

:mod:`.config` (the driver's config from the elastic settings, and their checks),
:mod:`.driver` (the decisions: a pure state machine over plain data), :mod:`.events`
(what goes in and out of the driver), :mod:`.records` (the data it keeps),
:mod:`.hosts`, :mod:`.workers` and :mod:`.assignment` (its helpers over hosts, workers
and the rank layout), :mod:`.discovery` (parsing the script's output, and running it),
:mod:`.plan` (the rank plans of a batch of workers and of the first generation, by the
static planner), :mod:`.runner` (the loop that performs the driver's actions).
"""
