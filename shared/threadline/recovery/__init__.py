"""Defence in depth: the run-orchestrator's sweeper finds runs that nothing drives on any more
and drives them on (:mod:`.decide` decides, :mod:`.sweeper` runs the loop, the SQL is in
:mod:`threadline.flows.recovery`)."""
