"""The paid flow: the one state machine of a paid request (:mod:`.flow`) and the parts it holds."""
