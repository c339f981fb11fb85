"""The framework-neutral API layer: init/shutdown and who-am-I (:mod:`.state`), every
collective on numpy arrays and buffers, synchronous (:mod:`.sync_ops`) and asynchronous
(:mod:`.async_ops`), and process sets (:mod:`.process_sets`). ``gcurun.runtime``
re-exports its public names; the torch binding (and a tensorflow one) build on them."""
