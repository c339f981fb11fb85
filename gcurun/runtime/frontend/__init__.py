"""The framework-neutral API layer: init/shutdown and who-am-I (:mod:`.state`), every
collective on numpy arrays and buffers, synchronous (:mod:`.sync_ops`) and asynchronous
(:mod:`.async_ops`, whose ``submit`` every binding's asynchronous op goes through),
the one table of handles of every binding (:mod:`.handles`), the one builder of each
collective's op (:mod:`.build`), and process sets (:mod:`.process_sets`).
``gcurun.runtime`` re-exports its public names; the torch and TensorFlow bindings build
on them."""
