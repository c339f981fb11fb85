"""The background engine: negotiation (:mod:`.negotiation`, with the response cache),
execution and fusion (:mod:`.executor`, :mod:`.fusion`), the stall inspector, the
timeline and huge pages. One engine per transport: the job's, and each process set's."""
